"""CUDA graphs: ``cudagraphs/*``, what was recorded and replayed, counted rather than assumed, and what of
the compiled step Inductor put in CUDA graphs.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

CUDAGRAPHS_REQUESTED = define("cudagraphs/requested", "whether CUDA graphs were asked for (cudagraphs.mode)")
CUDAGRAPHS_MODE = define("cudagraphs/mode", "cudagraphs.mode: auto (the default), reduce_overhead (Inductor's "
                          "CUDA-graph trees) or disabled")
CUDAGRAPHS_ACTIVE = define("cudagraphs/active", "whether CUDA graphs were recorded and replayed",
                           label="CUDA graphs active")
CUDAGRAPHS_RECORDINGS = define("cudagraphs/recordings", "CUDA graphs recorded (graph partitions), all steps",
                               label="  graphs recorded")
CUDAGRAPHS_RERECORDINGS = define("cudagraphs/rerecordings",
                                 "recordings of a graph already recorded in an earlier step (0 when replays hold)",
                                 label="  recorded again")
CUDAGRAPHS_RECORDING_STEPS = define("cudagraphs/recording_steps", "steps that recorded anything")
CUDAGRAPHS_REPLAY_STEPS = define("cudagraphs/replay_steps",
                                 "steps whose own forward and backward replayed their graphs, recording nothing",
                                 label="  steps replayed")
CUDAGRAPHS_STATIC_STATE_TENSORS = define("cudagraphs/static_state_tensors",
                                         "optimizer-state tensors marked static, so a graph reads them in place")
CUDAGRAPHS_STATIC_BATCH_COPIES = define("cudagraphs/static_batch_copies",
                                        "batch tensors copied into their static buffers")
CUDAGRAPHS_STATIC_BATCH_PASSED_THROUGH = define("cudagraphs/static_batch_passed_through",
                                                "batches passed on as they were: a new signature after the static "
                                                "buffers' max_signatures")
CUDAGRAPHS_PARTITIONS_GRAPHED = define("cudagraphs/partitions_graphed",
                                       "graph partitions Inductor made CUDA graphs of, of all it made (each compiled "
                                       "graph is split where a node cannot be recorded; the rest run eagerly, each "
                                       "reason listed under the table with its fix)",
                                       label="  partitions in CUDA graphs")
CUDAGRAPHS_PARTITIONS = define("cudagraphs/partitions",
                               "graph partitions Inductor made of the graphs it compiled (M of partitions in CUDA "
                               "graphs)")
CUDAGRAPHS_GRAPHS_PARTITIONED = define("cudagraphs/graphs_partitioned",
                                       "compiled graphs whose partitions are counted (a graph loaded from the compile "
                                       "cache is not)")
CUDAGRAPHS_EAGER_REASONS = define("cudagraphs/eager_reasons",
                                  'nodes left out of CUDA graphs: [{"reason", "nodes", "graphs", "example", "fix"}], '
                                  "torch's reason, how many, in which graphs, one operator and the change that brings "
                                  "them in")
CUDAGRAPHS_DECISION = define("cudagraphs/decision",
                             "whether CUDA graphs are on and why: cudagraphs=auto's decision (on where the step is "
                             "eligible, off with the reason otherwise), or what was asked for",
                             label="CUDA graphs")
CUDAGRAPHS_OPTIMIZER_RECORDINGS = define("cudagraphs/optimizer_recordings",
                                         "captures of the graph-safe optimizer step (clipping, the update, zeroing) "
                                         "into its CUDA graph: 1 when its replays hold",
                                         label="  optimizer step recorded")
CUDAGRAPHS_OPTIMIZER_REPLAYS = define("cudagraphs/optimizer_replays",
                                      "optimizer steps that replayed the graph-safe step's CUDA graph",
                                      label="  optimizer steps replayed")
CUDAGRAPHS_OPTIMIZER_UNCAPTURED = define("cudagraphs/optimizer_uncaptured",
                                         "optimizer steps the graph-safe step ran as it is: its warm-up, everywhere "
                                         "without CUDA graphs, or after it stopped capturing (why: "
                                         "compile/optimizer_reason)")
