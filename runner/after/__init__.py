"""After training: export, eval, generate and resume (``python -m runner export | eval | generate | resume``), and
``at_end``, what ``run`` does with the model when a fit ends. Below ``runner.run``, above ``runner.build``."""
