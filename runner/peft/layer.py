"""One adapter per linear: a frozen base weight beside a trainable low-rank update (torchtune's ``LoRALinear``). ``y = x
W^T + b + B(scale * A(dropout(x)))`` with ``scale = alpha / r``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Ungated:
    """No gate: the adapter's contribution as it is (every run without a preference objective)."""

    def __call__(self, delta: torch.Tensor) -> torch.Tensor:
        return delta


UNGATED = Ungated()


class AdapterGate:
    """One factor on every adapted layer's contribution: 1.0 runs the adapted model, 0.0 the frozen base exactly."""

    def __init__(self) -> None:
        self.value: torch.Tensor | None = None

    def __call__(self, delta: torch.Tensor) -> torch.Tensor:
        return delta if self.value is None else delta * self.value


class LoRALinear(nn.Module):
    """``base``'s weight and bias (frozen), plus ``lora_A`` [r, in] and ``lora_B`` [out, r] (trained; B starts at zero,
    so the adapted layer starts as the base layer, as in peft)."""

    def __init__(self, base: nn.Module, r: int, alpha: float, dropout: float) -> None:
        super().__init__()
        weight: torch.Tensor = base.weight  # type: ignore[assignment]
        # transformers' Conv1D (GPT-2's linear) stores its weight [in, out]: peft's fan_in_fan_out.
        self.fan_in_fan_out = not isinstance(base, nn.Linear)
        self.out_features, self.in_features = (weight.t() if self.fan_in_fan_out else weight).shape
        self.r = r
        self.scale = alpha / r
        self._take_base(base)
        self.bias: nn.Parameter | None = base.bias  # type: ignore[assignment]
        if self.bias is not None:
            self.bias.requires_grad_(False)
        # The adapter in float32 at least: a bf16 base keeps a full-precision adapter (QLoRA's rule too).
        dtype = torch.promote_types(weight.dtype, torch.float32) if weight.is_floating_point() else torch.float32
        device = weight.device
        self.lora_A = nn.Linear(self.in_features, r, bias=False, device=device, dtype=dtype)
        self.lora_B = nn.Linear(r, self.out_features, bias=False, device=device, dtype=dtype)
        self.dropout: nn.Module = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.gate: Ungated | AdapterGate = UNGATED  # a plain attribute, not a submodule: no state, no parameters
        self.reset_adapter()

    def _take_base(self, base: nn.Module) -> None:
        """Keep ``base``'s own weight (no copy), frozen."""
        self.weight: nn.Parameter = base.weight  # type: ignore[assignment]
        self.weight.requires_grad_(False)

    @torch.no_grad()
    def reset_adapter(self) -> None:
        """peft's initialisation: A Kaiming-uniform (as ``nn.Linear``), B zero."""
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def base_forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def low_rank(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., r]``: what ``lora_B`` reads, the adapter's inner activations scaled and gated."""
        return self.gate(self.lora_A(self.dropout(x.to(self.lora_A.weight.dtype))) * self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = self.base_forward(x)
        return base + self.lora_B(self.low_rank(x)).to(base.dtype)  # the base's dtype: bf16 under bf16-mixed, as peft

    @torch.no_grad()
    def base_weight(self) -> torch.Tensor:
        """The base weight [out, in] in full precision (dequantized for QLoRA)."""
        return self.weight.detach()

    @torch.no_grad()
    def delta(self) -> torch.Tensor:
        """What the adapter adds to the base weight: ``scale * B @ A`` [out, in]."""
        return (self.lora_B.weight @ self.lora_A.weight) * self.scale

    @torch.no_grad()
    def merged(self) -> nn.Module:
        """The base layer's kind holding base + adapter, as peft's ``merge_and_unload`` leaves it."""
        base = self.base_weight()
        weight = base + self.delta().to(base.dtype)
        out: nn.Module
        if self.fan_in_fan_out:
            from transformers.pytorch_utils import Conv1D

            out = Conv1D(self.out_features, self.in_features).to(weight.device, weight.dtype)
            weight = weight.t()
        else:
            out = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device=weight.device,
                            dtype=weight.dtype)
        out.weight.copy_(weight)
        if self.bias is not None:
            out.bias.copy_(self.bias)
        return out

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, scale={self.scale:g}"


class LoRAConv1D(LoRALinear):
    """``LoRALinear`` over transformers' ``Conv1D`` (weight [in, out]: GPT-2's attention and MLP)."""

    def base_forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.t(), self.bias)

    @torch.no_grad()
    def base_weight(self) -> torch.Tensor:
        return self.weight.detach().t()
