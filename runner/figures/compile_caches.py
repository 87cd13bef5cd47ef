"""The compile caches: ``compile/*`` figures of torch's on-disk caches, the portable cache artifacts and the
shared (remote) cache of ``compile.cache``.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

COMPILE_CACHE_HITS = define("compile/cache_hits", "graphs loaded from Inductor's or AOTAutograd's disk cache",
                            label="compile-cache hits")
COMPILE_CACHE_MISSES = define("compile/cache_misses", "graphs looked up in those caches and compiled anew",
                              label="compile-cache misses")
COMPILE_CACHE_ARTIFACTS_LOADED = define("compile/cache_artifacts_loaded",
                                        "torch's portable cache artifacts loaded from "
                                        "reliability.load_cache_artifacts: entries per artifact kind (null: none "
                                        "loaded)")
COMPILE_CACHE_ARTIFACTS_SAVED = define("compile/cache_artifacts_saved",
                                       "where the run saved torch's portable cache artifacts "
                                       "(reliability.save_cache_artifacts; null: not saved)")
COMPILE_REMOTE_CACHE = define("compile/remote_cache",
                              "the shared cache's address (compile.cache), without its password")
COMPILE_REMOTE_CACHE_STATUS = define("compile/remote_cache_status",
                                     "in use (every entry signed); in use, unsigned (compile.cache_trust=unsigned); "
                                     "unreachable; or off after a failure, and why",
                                     label="shared cache (compile.cache)")
COMPILE_REMOTE_CACHE_HITS = define("compile/remote_cache_hits",
                                   "graphs found in the shared compile cache (compile.cache), FX-graph and AOTAutograd",
                                   label="shared-cache hits")
COMPILE_REMOTE_CACHE_MISSES = define("compile/remote_cache_misses", "graphs looked up there and compiled anew",
                                     label="shared-cache misses")
COMPILE_REMOTE_ENTRIES_REJECTED = define("compile/remote_entries_rejected",
                                         "torch's entries read from the shared cache and refused before torch saw "
                                         "them: unsigned, signed under another secret, changed, truncated or moved "
                                         "from another key (counted as misses, compiled here and stored again)",
                                         label="  entries rejected")
COMPILE_REMOTE_KERNELS_FETCHED = define("compile/remote_kernels_fetched",
                                        "CPU: built kernels taken from the shared cache",
                                        label="  kernels fetched")
COMPILE_REMOTE_KERNELS_UPLOADED = define("compile/remote_kernels_uploaded",
                                         "CPU: built kernels this process added to the shared cache")
COMPILE_REMOTE_KERNELS_REJECTED = define("compile/remote_kernels_rejected",
                                         "CPU: shared entries not written: a bad name, signature or content (compiled "
                                         "here instead)",
                                         label="  kernels rejected")
