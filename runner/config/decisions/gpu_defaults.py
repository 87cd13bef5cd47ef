"""The defaults the GPU benchmark's rows decide, one line each (docs/gpu.md, "Defaults follow the rows"): a row of
``benchmarks/results/gpu.json`` that flips one changes one line here. Plain values: this module imports nothing."""

from __future__ import annotations

# cudagraphs=auto turns CUDA graphs on where the step is eligible. Decided by gpt_small and gpt_124m:
# runner_cudagraphs against runner_cudagraphs_disabled; False when either is slower (median same-round ratio above
# 1.00) or records graphs after its warm-up. Not measured yet: no row has both contestants.
CUDAGRAPHS_AUTO = True

# compile.optimizer=auto picks the graph-safe step (graphed: clipping, the update and zeroing in one CUDA graph)
# where CUDA graphs are on; False keeps the fused kernel outside the graph tree. Decided by gpt_small and
# gpt_124m: runner_graphed against runner_cudagraphs; True when graphed is at least as fast on both. Not measured yet.
OPTIMIZER_AUTO_GRAPHED = False

# compile.background=auto on a CUDA device compiles in a second process beside the run where the device has room,
# training eagerly until the compiled step is ready. Decided by hf_varlen: runner_best against runner_bucket, at 300
# and 3,000 batches; False when background finishes later at both. Not measured yet (True without a row: the issue
# that built it asks for it, and auto still compiles in the run where the device has no room).
BACKGROUND_AUTO_ON_CUDA = True
