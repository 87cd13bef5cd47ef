"""Fine-tuning through low-rank adapters (``peft=lora``, ``peft=qlora``; docs/peft.md): runner's own single-adapter
layer (``layer``; its NF4 base in ``nf4``), the adapter a model holds (``adapter``), put into any model by module path
(``inject``), written and read in peft's format (``files``), and what it trains and holds as figures (``report``)."""

from runner.peft.adapter import Adapter, adapter_of
from runner.peft.inject import apply_peft, merge_peft
from runner.peft.layer import LoRALinear
from runner.peft.report import optimizer_state_bytes, peft_figures

__all__ = ["Adapter", "LoRALinear", "adapter_of", "apply_peft", "merge_peft", "optimizer_state_bytes", "peft_figures"]
