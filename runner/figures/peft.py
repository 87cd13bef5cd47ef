"""Fine-tuning through an adapter: ``peft/*``, what ``peft=lora`` or ``peft=qlora`` trains and holds (absent for a
full fine-tune).

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

PEFT_METHOD = define("peft/method", "how the model was fine-tuned: lora or qlora (peft.method)", label="method")
PEFT_TARGETS = define("peft/targets", "linear layers the adapter adapts (peft.target_modules)",
                      label="adapted linears")
PEFT_TRAINABLE_PARAMS = define("peft/trainable_params",
                               "parameters the optimizer updates: the adapter and the modules trained in full",
                               label="trainable parameters")
PEFT_TOTAL_PARAMS = define("peft/total_params", "parameters of the model, each NF4 base weight counted by the "
                           "values it holds", label="total parameters")
PEFT_TRAINABLE_PCT = define("peft/trainable_pct", "trainable parameters as a share of the total, in percent",
                            label="trainable [%]")
PEFT_OPTIMIZER_STATE_BYTES = define("peft/optimizer_state_bytes",
                                    "bytes of the optimizer's state at the end of the fit (AdamW: two moments per "
                                    "trainable parameter)", label="optimizer state [bytes]")
PEFT_BASE_WEIGHT_BYTES = define("peft/base_weight_bytes", "bytes of the frozen weights (NF4 codes and scales under "
                                "qlora)", label="frozen weights [bytes]")
