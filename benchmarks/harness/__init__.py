"""How the CPU benchmarks race their contestants: each contestant in its own process forked from a preloaded
server (``fork_server``), taking turns (``race``), its time in Lightning's callback dispatch clocked
(``hook_clock``), and ``compare.py``'s cold and warm compile runs (``compile_cache``)."""
