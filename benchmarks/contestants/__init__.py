"""Who races on the CPU and on what: each benchmark's contestants (``compare``, which the others build on, ``peft``,
``vocab``, ``dpo``), the step clock each keeps (``pacer``), what a workload is (``workload``) and the workloads by
name (``workloads``, ``family_workloads``). ``gpu.py``'s ``lora``, ``vocab`` and ``dpo`` workloads run these
contestants on the GPU."""
