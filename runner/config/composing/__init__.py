"""From the command line and the YAML layers to a validated ``RunConfig``, through Hydra.

``precheck`` (the command line, validated before Hydra makes a run directory), ``loading`` (``compose``, and the
conversion to a typed ``RunConfig`` that is validated once), ``store`` (the schemas registered with Hydra, the
search path over the layers), ``messages`` (Hydra's and OmegaConf's errors in runner's words), ``help_text``
(``runner --help``), ``recipe_files`` (the recipes a run can see), ``layers`` (where config files come from) and
``run_dirs`` (every run its own directory, a Hydra callback).

The schema, the checks and the rules import without Hydra, which modules here import at their top. ``runner.config``
imports ``compose`` and ``load`` when first used, and this ``__init__`` imports nothing, so ``runner.config``'s
``CONF_DIR`` and ``recipes`` (from ``layers`` and ``recipe_files``, which need only PyYAML) do not pull Hydra in.
"""
