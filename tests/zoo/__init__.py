"""A zoo of small LightningModules, one per idiom of issue 15, written the way users write them.

Each module is plain Lightning (nothing in it knows about runner): ``tests/test_idioms.py`` trains it
through ``CompileStrategy`` and through eager Lightning on the same seed and batches, and
``benchmarks/idioms.py`` measures it. ``registry.IDIOMS`` names every entry with how to build it.
"""
