"""When compiling goes wrong (``compile.on_error``): a compile error explained in one paragraph, and recompile
storms found (the stack demotes them: ``runner.stack.demotion``). Imports the spine's ``component`` and
``torch_internals`` only.
"""
