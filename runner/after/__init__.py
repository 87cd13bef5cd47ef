"""After training: the model exported in its family's own format, evaluated, sampled, and the run resumed from
its own config (docs/after-training.md). ``python -m runner export | eval | generate | resume`` (``cli``, and
``resume`` for the resumed command line); ``at_end``: what ``run`` does with the model at the end of a fit.

Below ``runner.run`` (which calls ``at_end``) and above ``runner.build`` (the model and data built as a run's)."""
