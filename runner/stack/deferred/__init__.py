"""What a compiled ``training_step`` keeps out of its graph: ``self.log`` and metric calls deferred to after the
step, Python state read fresh without guards. Imports the spine's ``component`` and ``torch_internals`` only.
"""
