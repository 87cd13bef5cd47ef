"""The closed options of the compile stack (scope, shape policy, saved-activation strategy), each member with its row
(``Scope.step.row.whole_step``): the code asks the row, never which member it holds (``tests/test_option_tables.py``),
so adding an option is one member here and its YAML file. No torch here: ``import runner`` imports neither."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class _Options(Enum):
    """An enum whose members are ``name = (value, row)``: ``.value`` is the name (OmegaConf matches by name), ``.row``
    the properties."""

    row: Any

    def __new__(cls, value: str, row: Any) -> _Options:
        member = object.__new__(cls)
        member._value_ = value
        member.row = row
        return member


# -- compile.scope ---------------------------------------------------------------------------------------------
class InPlace(Enum):
    """What a scope compiles in place, module by module (its ``forward`` replaced by a compiled one)."""

    nothing = "nothing"
    submodules = "submodules"  # the LightningModule's direct submodules
    blocks = "blocks"  # each repeated block (the children of the largest ModuleList, or compile.block_types)


class Eagerly(Enum):
    """Which of the model's modules run outside compiled code under a scope."""

    all = "all"
    none = "none"
    outside_blocks = "outside_blocks"


@dataclass(frozen=True)
class ScopeRow:
    """What a ``compile.scope`` compiles."""

    report_name: str  # compile/target's value in the report (the names it has always had).
    compiles: bool = True
    in_place: InPlace = InPlace.nothing
    whole_step: bool = False  # training_step is compiled as one call.
    backward_in_step: bool = False  # loss.backward() is traced into the step's graph (Lightning's backward is skipped).
    eagerly: Eagerly = Eagerly.none
    # Autograd saves activations between a compiled forward and its backward (not when both are one graph).
    saves_across_graphs: bool = True
    under_ddp: bool = True  # Works under DDP's gradient reducer (which must see backward run after forward returns).
    under_fsdp: bool = False  # Works with FSDP2, which runner shards block by block after compiling each one.


class Scope(_Options):
    """What the strategy hands to ``torch.compile``."""

    # nothing: plain eager training
    none = "none", ScopeRow("nothing", compiles=False, eagerly=Eagerly.all, under_fsdp=True)
    # the module's forward only (what Lightning does today)
    model = "model", ScopeRow("submodules", in_place=InPlace.submodules)
    # training_step: forward and loss; backward runs the AOT-compiled backward
    step = "step", ScopeRow("step", whole_step=True)
    # forward, loss and backward traced into one graph
    step_backward = "step_backward", ScopeRow("step_and_backward", whole_step=True, backward_in_step=True,
                                              saves_across_graphs=False, under_ddp=False)
    # each repeated block (e.g. transformer layer) compiled once, reused
    blocks = "blocks", ScopeRow("blocks", in_place=InPlace.blocks, eagerly=Eagerly.outside_blocks, under_fsdp=True)


# -- dynamic.policy --------------------------------------------------------------------------------------------
class Pad(Enum):
    """Where a policy's collate pads a batch of variable-length sequences."""

    longest = "longest"  # to the batch's longest sequence
    max_length = "max_length"  # to the data's seq_len
    buckets = "buckets"  # to the next of dynamic.buckets


class Mark(Enum):
    """How a policy marks the configured dims of every batch tensor before the compiled step sees them."""

    none = "none"
    dynamic = "dynamic"  # torch._dynamo.mark_dynamic, bounded by dynamic.min/max
    unbacked = "unbacked"  # mark_unbacked: no specialisation at all, not even on 0/1


@dataclass(frozen=True)
class ShapePolicyRow:
    """What a ``dynamic.policy`` does to batches and to the compiler."""

    pad: Pad = Pad.longest
    # torch.compile(dynamic=...): False compiles static graphs only; None leaves it to marks or to torch's automatic
    # dynamic.
    compile_dynamic: bool | None = None
    mark: Mark = Mark.none
    # The smallest dynamic.min that works (unbacked: 2, or causal attention cannot rule out an empty sequence and falls
    # back to eager).
    min_length: int = 0
    # Several ranks must agree on which dims are dynamic (padded policies present the same shapes everywhere).
    ranks_agree: bool = True
    cudagraphs: bool = True  # A CUDA graph can record it (unbacked sizes are unknown until run time).

    @property
    def marks_dims(self) -> bool:
        """Whether the policy marks ``dynamic.dims`` (and so takes ``dynamic.min``/``max``)."""
        return self.mark is not Mark.none

    @property
    def takes_buckets(self) -> bool:
        """Whether the policy pads to ``dynamic.buckets`` (which it then needs)."""
        return self.pad is Pad.buckets


class ShapePolicy(_Options):
    """How batch shapes that vary are presented to the compiler."""

    # pad every batch to the maximum length: one graph
    static = "static", ShapePolicyRow(pad=Pad.max_length, compile_dynamic=False, ranks_agree=False)
    # pad to the next bucket boundary: at most one graph per bucket
    bucket = "bucket", ShapePolicyRow(pad=Pad.buckets, compile_dynamic=False, ranks_agree=False)
    automatic = "automatic", ShapePolicyRow()  # torch's automatic dynamic: static first, dynamic after a change
    # mark_dynamic on the configured dims: one graph for all lengths
    dynamic = "dynamic", ShapePolicyRow(mark=Mark.dynamic)
    # mark_unbacked: no specialisation at all, not even on 0/1
    unbacked = "unbacked", ShapePolicyRow(mark=Mark.unbacked, min_length=2, cudagraphs=False)


# -- offload.strategy ------------------------------------------------------------------------------------------
class Keeps(Enum):
    """Where a saved-activation strategy keeps what autograd saves for backward."""

    as_saved = "as_saved"  # nothing changes
    host_memory = "host_memory"  # copied to pinned host memory on a side stream (CUDA)
    encoded = "encoded"  # stored narrow by a codec, restored in backward
    recomputed = "recomputed"  # not kept: recomputed in backward (checkpointing)


@dataclass(frozen=True)
class Codec:
    """How a codec stores a floating saved tensor: as ``payload`` (a torch dtype's name), with a per-tensor scale
    ``amax / max`` when ``scaled`` (so the largest magnitude maps to the payload's largest finite value)."""

    name: str
    payload: str
    itemsize: int  # Bytes per stored element: a tensor already this small is not worth packing.
    scaled: bool = False


@dataclass(frozen=True)
class OffloadRow:
    """What an ``offload.strategy`` does with saved activations."""

    keeps: Keeps
    codec: Codec | None = None
    cuda_only: bool = False  # Pointless elsewhere: acts as none with one warning.
    # Its hooks are traced into compiled graphs (honouring offload.exclude there); False: they run eagerly on what a
    # compiled forward saved, where no module is known.
    traced: bool = True
    cudagraphs: bool = True  # A CUDA graph can capture it (stream and event calls in eager hooks cannot be).

    @property
    def active(self) -> bool:
        """Whether the strategy changes anything (and so is worth measuring against ``none``)."""
        return self.keeps is not Keeps.as_saved


class OffloadStrategy(_Options):
    """What happens to tensors autograd saves for backward."""

    none = "none", OffloadRow(Keeps.as_saved)
    # copy to pinned host memory on a side stream (CUDA only; a no-op on CPU)
    cpu = "cpu", OffloadRow(Keeps.host_memory, cuda_only=True, traced=False, cudagraphs=False)
    # store floating tensors as bfloat16
    bf16 = "bf16", OffloadRow(Keeps.encoded, Codec("bf16", "bfloat16", itemsize=2))
    # store floating tensors as float8_e4m3fn with a per-tensor scale
    fp8 = "fp8", OffloadRow(Keeps.encoded, Codec("fp8", "float8_e4m3fn", itemsize=1, scaled=True))
    checkpoint = "checkpoint", OffloadRow(Keeps.recomputed)  # recompute in backward instead of saving
