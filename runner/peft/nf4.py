"""QLoRA's frozen base weights in 4-bit NF4: torchao's format, run through two registered ops."""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runner.config.decisions.peft import NF4_BLOCK, nf4_scaler_block
from runner.peft.layer import LoRALinear
from runner.torch_internals.nf4 import nf4_module


def dequantize(codes: torch.Tensor, scalers: torch.Tensor, factor: torch.Tensor, mean: torch.Tensor,
               lut: torch.Tensor, out_features: int, in_features: int, block: int, group: int) -> torch.Tensor:
    """The weight [out, in] the NF4 pieces hold (through torchao's ``NF4Tensor``), in the lookup table's dtype."""
    nf4_tensor = nf4_module()
    shape = torch.Size((out_features, in_features))
    meta = nf4_tensor.SubclassTensorArgs(shape, (in_features, 1), 0, lut.dtype, codes.device, False)
    nf4 = nf4_tensor.NF4Tensor(meta, block, codes.numel() * 2 // block, group, scalers, factor, mean, codes, lut)
    return nf4.get_original_weight()


@functools.cache
def ops() -> Any:
    """Register runner's two NF4 ops once; ``torch.ops.runner``."""

    @torch.library.custom_op("runner::nf4_linear", mutates_args=())
    def nf4_linear(x: torch.Tensor, codes: torch.Tensor, scalers: torch.Tensor, factor: torch.Tensor,
                   mean: torch.Tensor, lut: torch.Tensor, out_features: int, in_features: int, block: int,
                   group: int) -> torch.Tensor:
        w = dequantize(codes, scalers, factor, mean, lut, out_features, in_features, block, group)
        return F.linear(x, w.to(x.dtype))

    @nf4_linear.register_fake
    def _(x: torch.Tensor, codes: torch.Tensor, scalers: torch.Tensor, factor: torch.Tensor, mean: torch.Tensor,
          lut: torch.Tensor, out_features: int, in_features: int, block: int, group: int) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], out_features))

    @torch.library.custom_op("runner::nf4_linear_grad_input", mutates_args=())
    def nf4_linear_grad_input(grad: torch.Tensor, codes: torch.Tensor, scalers: torch.Tensor, factor: torch.Tensor,
                              mean: torch.Tensor, lut: torch.Tensor, out_features: int, in_features: int, block: int,
                              group: int) -> torch.Tensor:
        w = dequantize(codes, scalers, factor, mean, lut, out_features, in_features, block, group)
        return grad @ w.to(grad.dtype)

    @nf4_linear_grad_input.register_fake
    def _(grad: torch.Tensor, codes: torch.Tensor, scalers: torch.Tensor, factor: torch.Tensor, mean: torch.Tensor,
          lut: torch.Tensor, out_features: int, in_features: int, block: int, group: int) -> torch.Tensor:
        return grad.new_empty((*grad.shape[:-1], in_features))

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs[1:6])
        ctx.sizes = inputs[6:]

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        grad_input = torch.ops.runner.nf4_linear_grad_input(grad, *ctx.saved_tensors, *ctx.sizes)
        return (grad_input, *(None,) * 9)

    nf4_linear.register_autograd(backward, setup_context=setup_context)
    return torch.ops.runner


class QLoRALinear(LoRALinear):
    """``LoRALinear`` whose frozen base weight is NF4 buffers run through ``runner::nf4_linear``."""

    weight_codes: torch.Tensor
    weight_scalers: torch.Tensor
    weight_factor: torch.Tensor
    weight_mean: torch.Tensor
    weight_lut: torch.Tensor

    def _take_base(self, base: nn.Module) -> None:
        w: torch.Tensor = base.weight.detach()  # type: ignore[operator]
        w = w.t() if self.fan_in_fan_out else w  # quantized as [out, in]
        self.block, self.group = NF4_BLOCK, nf4_scaler_block(w.numel())
        if w.is_meta:  # shapes only (the config checks build models on the meta device)
            q: Any = _MetaPieces(w, self.block, self.group)
        else:
            q = nf4_module().to_nf4(w.float().contiguous(), self.block, self.group)
        self.register_buffer("weight_codes", q.quantized_data)
        self.register_buffer("weight_scalers", q.quantized_scalers)
        self.register_buffer("weight_factor", q.quantization_factor)
        self.register_buffer("weight_mean", q.scaler_mean)
        self.register_buffer("weight_lut", q.nf4)

    def pieces(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.weight_codes, self.weight_scalers, self.weight_factor, self.weight_mean, self.weight_lut

    def base_forward(self, x: torch.Tensor) -> torch.Tensor:
        # Autocast does not know runner's op: cast its input as autocast casts a linear's (bf16-mixed runs the
        # base matmul in bf16, as for LoRA's base), not in the float32 an RMSNorm hands it.
        if torch.is_autocast_enabled(x.device.type):
            x = x.to(torch.get_autocast_dtype(x.device.type))
        y = torch.ops.runner.nf4_linear(x, *self.pieces(), self.out_features, self.in_features, self.block,
                                        self.group)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    @torch.no_grad()
    def base_weight(self) -> torch.Tensor:
        return dequantize(*self.pieces(), self.out_features, self.in_features, self.block, self.group)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base=nf4"


class _MetaPieces:
    """The NF4 pieces' shapes on the meta device (``to_nf4`` reads values)."""

    def __init__(self, w: torch.Tensor, block: int, group: int) -> None:
        n, blocks = w.numel(), w.numel() // block
        self.quantized_data = torch.empty(n // 2, dtype=torch.uint8, device="meta")
        self.quantized_scalers = torch.empty(blocks, dtype=torch.int8, device="meta")
        self.quantization_factor = torch.empty(blocks // group, dtype=torch.float32, device="meta")
        self.scaler_mean = torch.empty((), dtype=torch.float32, device="meta")
        self.nf4 = torch.empty(16, dtype=torch.float32, device="meta")


ops()  # at import: a layer unpickled in another process (the compile beside the run) finds its ops registered
