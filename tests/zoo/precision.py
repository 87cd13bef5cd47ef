"""``Trainer(precision="bf16-mixed")``: the step runs under ``torch.autocast`` with bfloat16 on the CPU
(the precision page's "BFloat16 Mixed Precision"). Kept tiny: CPUs without bfloat16 units emulate it."""

from __future__ import annotations

from tests.zoo.plain import PlainClassifier


class BF16Module(PlainClassifier):
    """The plain classifier; the idiom is the Trainer's ``precision="bf16-mixed"``."""
