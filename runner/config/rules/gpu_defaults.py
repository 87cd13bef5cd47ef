"""The defaults that the GPU benchmark's rows decide, one line each (docs/gpu.md, "Defaults follow the rows").

Each is read where its decision is made, and nowhere else: ``CUDAGRAPHS_AUTO`` by ``runner.config.rules.stack``
(``cudagraphs=auto``), ``OPTIMIZER_AUTO_GRAPHED`` by ``runner.stack.compiling.optimizer_policy``
(``compile.optimizer=auto``) and ``BACKGROUND_AUTO_ON_CUDA`` by ``runner.stack.background.policy``
(``compile.background=auto``). A row of ``benchmarks/results/gpu.json`` that flips one changes one line here,
with the row cited beside it. Plain values: this module imports nothing.
"""

from __future__ import annotations

CUDAGRAPHS_AUTO = True
"""``cudagraphs=auto`` turns CUDA graphs on, on a CUDA device, where the step is eligible (static or bucketed
shapes, Inductor, no CPU offload, no accumulation, one process, memory free). Decided by ``gpt_small`` and
``gpt_124m``: ``runner_cudagraphs`` (the CUDA graphs ``auto`` turns on) against ``runner_cudagraphs_disabled``.
Turns False when either model's CUDA-graph step is slower (its median same-round ratio to the other above 1.00),
or records graphs after its warm-up. Not measured yet: no row has both contestants."""

OPTIMIZER_AUTO_GRAPHED = False
"""``compile.optimizer=auto`` picks the graph-safe step (``graphed``: clipping, the update and zeroing in one
CUDA graph) where CUDA graphs are on and nothing blocks it; False keeps the fused kernel outside the graph tree.
Decided by ``gpt_small`` and ``gpt_124m``: ``runner_graphed`` against ``runner_cudagraphs`` (the fused step,
CUDA graphs otherwise the same). Turns True when the graphed step is at least as fast on both models (ratio at most
1.00) and records its graph once. Not measured yet."""

BACKGROUND_AUTO_ON_CUDA = True
"""``compile.background=auto`` on a CUDA device compiles in a second process beside the run when the device has
room for it (``runner.stack.background.policy.room_for_process``), training eagerly until the compiled step is
ready; False compiles in the run's first step there. Decided by ``hf_varlen``: ``runner_best`` (compiling beside
the run) against ``runner_bucket`` (the same settings, compiling in the run), at 300 batches and at 3,000. Turns
False when beside finishes later at both. Not measured yet (set True without a row: the issue that built it asks
for it, and ``auto`` still compiles in the run where the device has no room)."""
