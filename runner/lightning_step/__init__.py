"""What exists only so that Lightning takes a compiled ``training_step``: the step's binding and signature, the
deferred ``self.log``, the log fast path, runner's callbacks dispatched as one, and the precision hooks around a
backward the graph already ran.

This folder could go if Lightning's ``self.log`` and metric bookkeeping were traceable by Dynamo (no caller
inspection or trainer state per call), and if its loop let a strategy own ``training_step`` and backward together
(one compiled call, with the precision and backward hooks called around it, and signatures read via ``__wrapped__``).
"""
