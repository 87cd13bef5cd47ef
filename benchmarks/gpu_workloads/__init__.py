"""``gpu.py``'s parts. Its workloads: ``gpt`` (``gpt_124m``, ``gpt_small``), ``hf`` (``hf_varlen``), ``specs``
(``memory``, ``cold_start``), ``packing``, ``lora``, ``dpo``, ``vocab``; what they share (``common``), its results
file and order of need (``results``), docs/gpu.md's tables (``docs``); the child process every job runs in
(``child``) and the jobs (``contestant``, ``jobs``, ``hf_job``, and each other workload's own). The driver's side
imports no torch."""
