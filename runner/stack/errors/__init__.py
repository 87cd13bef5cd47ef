"""When compiling goes wrong (``compile.on_error``): a compile error explained in one paragraph, and recompile
storms found (``CompileStack`` demotes them)."""
