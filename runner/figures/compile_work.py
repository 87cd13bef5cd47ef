"""What compiling did: ``compile/*`` figures of torch's own compile records and counters (frames, graphs,
recompiles, graph breaks, guards, compile time and its parts) and every reason, event and demotion.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

COMPILE_FRAMES = define("compile/frames", "Python functions Dynamo compiled", label="frames compiled")
COMPILE_FRAME_COMPILES = define("compile/frame_compiles",
                                "every forward compile: first compiles and recompiles of every frame")
COMPILE_GRAPHS = define("compile/graphs", "FX graphs produced (a graph break splits a function into several)",
                        label="graphs")
COMPILE_RECOMPILES = define("compile/recompiles", "compiles of an already compiled function after a guard failed",
                            label="recompiles")
COMPILE_FRAME_RECOMPILES = define("compile/frame_recompiles",
                                  "recompiles of every frame, the continuations after a graph break included "
                                  "(compile/recompiles folds those into their parent's)")
COMPILE_GRAPH_BREAKS = define("compile/graph_breaks", "distinct places where Dynamo split the graph",
                              label="graph breaks")
COMPILE_GRAPH_BREAK_HITS = define("compile/graph_break_hits",
                                  "how often the graph-break sites were hit while tracing, all sites together")
COMPILE_GUARDS_TOTAL = define("compile/guards_total", "guards checked before compiled code runs, all cache entries",
                              label="guards (total)")
COMPILE_GUARDS_MAX = define("compile/guards_max", "guards of the largest cache entry", label="guards (max per entry)")
COMPILE_LIVE_GUARDS_TOTAL = define("compile/live_guards_total",
                                   "leaf guards checked at run time (after guard_filter_fn), all live cache entries")
COMPILE_LIVE_GUARDS_MAX = define("compile/live_guards_max",
                                 "leaf guards of the largest live cache entry, as checked at run time")
COMPILE_TIME_S = define("compile/time_s", "seconds compiling in the run: forward, backward, recompiles; a resumed "
                        "run adds the parts before its resume (compile/time_before_resume_s)",
                        label="compile time [s]")
COMPILE_TIME_BEFORE_RESUME_S = define("compile/time_before_resume_s",
                                      "of which before the resume, in the processes the run resumed from (the rows "
                                      "below it are this process's)", label="  before the resume [s]")
COMPILE_DYNAMO_S = define("compile/dynamo_s", "of which tracing Python into graphs", label="  Dynamo [s]")
COMPILE_AOT_AUTOGRAD_S = define("compile/aot_autograd_s", "of which building the backward graphs",
                                label="  AOTAutograd [s]")
COMPILE_INDUCTOR_S = define("compile/inductor_s", "of which generating and compiling kernels", label="  Inductor [s]")
COMPILE_BACKWARD_S = define("compile/backward_s", "of compile/time_s, the seconds compiling backward graphs")
COMPILE_WALL_S = define("compile/wall_s",
                        "wall-clock seconds between torch's compile start and end callbacks, CUDA-graph recordings "
                        "left out")
COMPILE_CUDAGRAPH_RECORDING_S = define("compile/cudagraph_recording_s",
                                       "wall-clock seconds recording CUDA graphs (a recording runs the graph, it does "
                                       "not compile it)")
COMPILE_CUDAGRAPH_RECORDINGS = define("compile/cudagraph_recordings",
                                      "CUDA-graph recordings seen by torch's compile callbacks")
COMPILE_CUDAGRAPH_SKIPS = define("compile/cudagraph_skips", "graphs Inductor did not run as CUDA graphs",
                                 label="CUDA-graph skips")
COMPILE_FALLBACKS = define("compile/fallbacks", "functions that failed to compile and ran eagerly",
                           label="eager fallbacks")
COMPILE_DEMOTIONS = define("compile/demotions",
                           "frames that recompiled twice on one guard and were demoted (compile/demoted: which, to "
                           "what)",
                           label="demoted frames")
COMPILE_DEMOTED = define("compile/demoted",
                         'the frames demoted after a recompile storm: [{"frame", "guard", "step", "to"}], to compiled '
                         "submodules or eager")
COMPILE_RECOMPILE_LIMIT_HITS = define("compile/recompile_limit_hits",
                                      'recompile limits hit: [{"limit", "function", "guard"}] (the frame then runs '
                                      "eagerly, or the run stops under compile.on_error=raise)")
COMPILE_RECOMPILE_REASONS = define("compile/recompile_reasons",
                                   'every recompile: [{"name", "location", "compile_id", "reason", "step", "fix"}], '
                                   "the guard that failed and the change that avoids it")
COMPILE_GRAPH_BREAK_REASONS = define("compile/graph_break_reasons",
                                     'every graph-break site: [{"reason", "user_frame", "count", "fix"}], how often '
                                     "it was hit and the change that removes it")
COMPILE_FALLBACK_REASONS = define("compile/fallback_reasons",
                                  'every function that failed to compile and ran eagerly: [{"name", "compile_id", '
                                  '"reason"}]')
COMPILE_EVENTS = define("compile/events",
                        'every compile: [{"kind", "name", "compile_id", "step", "duration_s"}], kind from '
                        "torch's trigger: compile, recompile, backward, cudagraph_recording")
COMPILE_REASONS = define("compile/reasons",
                         "wandb only: one table (kind, name, location, step, count, reason) of every recompile, "
                         "graph-break site and eager fallback")
