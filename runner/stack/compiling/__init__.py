"""What is compiled and how: the plan (every ``compile.scope`` decision, pure), carrying it out, the repeated
blocks, the step's binding and FSDP sharding. Imports the spine's ``component``/``fit_inputs`` and ``runner.config``.
"""
