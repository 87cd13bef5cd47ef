"""The decisions written once for both sides: the config check before the run (:mod:`runner.config.checks`) and the
code that does the thing at fit time (the stack, the loss's builder, the adapter's injection), which a user's own
``Trainer`` reaches with no config check. Each takes plain values, so both sides call it with what they know.

``stack`` (the compile stack's refusals and ``cudagraphs=auto``'s decision), ``loss`` (whether the cross-entropy is
chunked), ``peft`` (which modules an adapter adapts, and its files' keys) and ``gpu_defaults`` (the defaults the GPU
benchmark's rows decide, one line each).
"""
