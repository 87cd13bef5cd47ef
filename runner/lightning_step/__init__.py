"""What exists only so that Lightning takes a compiled ``training_step`` (its binding, the deferred ``self.log``, a log
fast path, runner's callbacks as one, the hooks around a backward the graph ran): it could go if ``self.log`` were
traceable by Dynamo and Lightning's loop let a strategy own ``training_step`` and backward together."""
