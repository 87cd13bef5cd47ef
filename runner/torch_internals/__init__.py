"""Every version-specific torch internal runner touches, one function each: the bottom layer.

No other runner module names ``torch._dynamo``, ``torch._inductor``, ``torch._functorch`` or ``torch._logging``;
``tests/test_torch_internals.py`` pins each function against the installed torch (2.11 through 2.15 in CI), so a
torch upgrade breaks one named test instead of the product. Callers import the submodule they use. Process-wide
settings go through ``settings.TorchSettings``, which puts back what it changed on ``restore()``."""
