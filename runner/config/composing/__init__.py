"""From the command line and the YAML layers through Hydra to a validated ``RunConfig``. This ``__init__`` imports
nothing: ``runner.config``'s ``CONF_DIR`` and ``recipes`` need only PyYAML, not Hydra."""
