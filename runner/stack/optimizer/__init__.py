"""How the optimizer step runs (``compile.optimizer``): eager, fused kernel or compiled, with Lightning's
closure contract kept. Imports ``compiling`` (the fused-kernel rule) and ``torch_internals``.
"""
