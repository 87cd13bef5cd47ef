"""What is compiled and how: the plan (every ``compile.scope`` decision, pure), carrying it out, the repeated
blocks and FSDP sharding."""
