"""Every version-specific torch internal runner touches (``torch._dynamo``, ``_inductor``, ``_functorch``,
``_logging``), one function each pinned by ``tests/test_torch_internals.py``: an upgrade fails a test, not the product.
Process-wide settings go through ``settings.TorchSettings``, which puts back what it changed."""
