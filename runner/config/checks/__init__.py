"""The checks a composed config passes before anything runs: ``validate`` runs every one and raises one
``ConfigError`` that lists each problem with its key and its fix, then logs the warnings.

One module a part of the config they look at: ``stack`` (compile, offload, CUDA graphs and how they meet the
trainer; ``dynamic``, the dynamic-shape policy, is among its checks), ``run`` (trainer, data, model sizes, paths,
ranges), ``fsdp`` (sharded parameters), ``inputs`` (what a user types: paths, devices, checkpoints, the fields given
to a ``_target_``), ``data`` (the data against the model), ``peft`` (the adapter against the model), ``objective``
(a preference objective against its data and reference) and ``loss`` (a chunked loss against the model's output
layer). A rule the stack enforces at fit time too is in :mod:`runner.config.rules`, not here.
"""
