"""A zoo of small LightningModules, one per idiom, written the way users and Lightning's documentation
write them (issues 15 and 28; docs/idioms.md maps each to its page).

Each module is plain Lightning (nothing in it knows about runner): ``tests/test_idioms.py`` trains it
through ``CompileStrategy`` and through eager Lightning on the same seed and batches, and
``benchmarks/idioms.py`` measures it. ``registry.IDIOMS`` names every entry with how to build it.
"""
