"""A suggested fix for each graph break and recompile torch reports, in the user's terms: rules matched in order
on torch's reason text, each naming the user-facing way out before torch knobs. Pure functions, no torch import."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_LIBRARY_DIRS = ("site-packages/", "dist-packages/")

# What a graph-break site's location says when the break is in torch's own optimizer code that runner compiled
# (optimizer step ``compiled``: set by ``compile.optimizer``, or chosen for CUDA graphs): runner's, not the user's.
RUNNERS_OPTIMIZER_STEP = "in torch's optimizer step, compiled by runner: expected"
_EXPECTED_BREAK = ("torch's optimizer steps break here by design (so that the update is traced under no_grad: "
                   "https://github.com/pytorch/pytorch/issues/104053), and runner compiled that step itself "
                   "(optimizer step: compiled, set by compile.optimizer or chosen for CUDA graphs): nothing to fix")


@dataclass(frozen=True)
class Advice:
    """One graph break or recompile, explained: what, where, torch's reason and the fix."""

    kind: str  # "graph_break" or "recompile"
    where: str | None  # the user's file:line, if known
    reason: str  # torch's reason, first line
    fix: str

    def __str__(self) -> str:
        what = "graph break" if self.kind == "graph_break" else "recompile"
        place = f" at {self.where}" if self.where else ""
        return f"{what}{place}: {self.reason}. {fix_label(self.where)}: {self.fix}"


# (pattern on torch's graph-break reason, fix). Patterns are case-insensitive regexes.
_BREAK_RULES: tuple[tuple[str, str], ...] = (
    (r"Tensor\.item\(\)|capture_scalar_outputs|Tensor\.tolist",
     "`.item()`/`float(t)`/`.tolist()` pulls a value out of the graph: keep it a tensor (self.log accepts "
     "tensors; runner logs them after the step), or move the read to on_train_batch_end"),
    (r"Data-dependent branching|guard_scalar branch",
     "an `if`/`while`/`assert` on a tensor's value: express it with tensor ops (torch.where, torch.clamp, "
     "multiplying by a mask), or move the check to a hook outside the step"),
    (r"Data dependent operator|Dynamic shape operator",
     "an op whose output size depends on the data (nonzero, boolean-mask indexing, unique, "
     "repeat_interleave): keep shapes fixed (torch.where or a multiplied mask instead of x[mask])"),
    (r"Tensor\.backward\(\)|backward\(\) with",
     "backward() inside the compiled step: return the loss and let Lightning run backward, or use "
     "compile.scope=step_backward to trace backward into the graph; with automatic_optimization=False runner "
     "compiles the submodules and runs manual_backward eagerly"),
    (r"requires_grad",
     "requires_grad changed inside the step (freezing layers, toggle_optimizer): do it in a hook "
     "(on_train_epoch_start, on_train_batch_start), or use manual optimization, where runner compiles the "
     "submodules and the step's orchestration runs eagerly"),
    (r"logging\.Logger|print|builtin op handler.*print",
     "Python logging/print inside the step: use self.log (recorded in the graph, run after it), or print "
     "from on_train_batch_end"),
    (r"numpy|from_numpy",
     "NumPy inside the step: use the torch equivalent, or move the NumPy code to a hook"),
    (r"torch\._dynamo\.graph_break\(\)",
     "an explicit graph break in the code called from the step (torch's optimizer steps have them by design): "
     "call that code outside the step, e.g. let Lightning step the optimizer (automatic optimization)"),
    (r"torch\.compiler\.disable\(\)",
     "a function marked torch.compiler.disable is called in the step: call it from a Lightning hook instead, "
     "or remove the decorator if it is traceable"),
    (r"marked as skipped|Unsupported function call|Unsupported method call|Failed to trace builtin",
     "the step calls code Dynamo cannot trace (a C extension, a skipped library, an unsupported builtin): "
     "call it from a Lightning hook, or wrap it in torch.compiler.disable to make the break explicit"),
    (r"context manager",
     "an unsupported context manager in the step: open it outside the step (a hook or the strategy), or "
     "use torch's own (torch.no_grad, torch.autocast)"),
    (r"generator",
     "a generator in the step: build a list (or a tensor) instead of yielding"),
    (r"deepcopy",
     "copy.deepcopy inside the step: copy once in setup() or a hook"),
    (r"hook",
     "tensor or module hooks in the step: set compile.compiled_autograd=true to capture them, or register "
     "them once in setup()"),
)

@dataclass(frozen=True)
class Batches:
    """What the run's batches are, for the advice on a recompile of a new shape (``runner.build`` says, from the
    data module's traits and the config; a user's own Trainer gets the default: nothing known)."""

    # Each batch is padded to its longest sequence: its length changes from batch to batch.
    pads_per_batch: bool = False
    can_pack: bool = False  # ``data.packing=true`` is there to turn on, and the model takes packed rows.


UNKNOWN_BATCHES = Batches()  # What the advice knows of batches it was told nothing about (a user's own Trainer).
_SIZE = re.compile(r"size mismatch at index (\d+)", re.IGNORECASE)


def shape_fix(reason: str, batches: Batches) -> str:
    """The fix for a recompile of a new input shape, for the data at hand: a sequence length that padding per
    batch changes (packing, a shape policy), or a batch size (the last, smaller batch: drop_last)."""
    found = _SIZE.search(reason)
    index = int(found.group(1)) if found else None
    pack = "data.packing=true (rows of exactly data.seq_len: one shape, no padding), or " if batches.can_pack else ""
    if index == 0:
        return ("the batch size changed (often the last, smaller batch of an epoch): DataLoader(drop_last=True), or "
                "dynamic=dynamic (the batch dim marked dynamic: one graph for every size)")
    if index is not None and batches.pads_per_batch:
        return (f"each batch is padded to its longest sequence, so its length changes from batch to batch: {pack}"
                "a shape policy: dynamic=bucket (lengths padded up to a few buckets, one graph each) or "
                "dynamic=dynamic (one graph for every length)")
    if index is not None:
        return ("a sequence length changed between batches: pad batches to fixed lengths or a few buckets "
                "(dynamic=bucket), mark the length dynamic (dynamic=dynamic), or pack sequences into full rows "
                "(runner's causal-LM data: data.packing=true)")
    return ("a new input shape: dynamic=dynamic (one graph for every shape) or dynamic=bucket; for the last, smaller "
            "batch of an epoch, DataLoader(drop_last=True)")


# (pattern on torch's failed guard, fix), for recompiles. A new shape's fix depends on the data: ``shape_fix``.
_SHAPE_RULE = r"size mismatch|stride mismatch|dimensionality"
_RECOMPILE_RULES: tuple[tuple[str, str], ...] = (
    (r"requires_grad mismatch",
     "requires_grad changed between calls (toggle_optimizer, freezing layers): one graph per state, compiled "
     "once each; move freezing out of the hot loop if it changes often"),
    (r"grad_mode|GLOBAL_STATE changed",
     "the same code ran with and without grad (validation under no_grad, then training): one graph each, "
     "compiled once each; nothing to fix unless it repeats"),
    (r"dtype mismatch",
     "an input changed dtype between steps: cast inputs once in the DataModule or the LightningModule's "
     "transfer_batch_to_device"),
    (r"device mismatch",
     "an input arrived on another device: move every tensor to the module's device before the step"),
    (r"len\(",
     "a function is called with a varying number of arguments: call it with a fixed signature, or keep that "
     "call (e.g. a metric object's) outside the compiled code; runner defers torchmetrics objects registered "
     "on the LightningModule"),
    (r"___check_obj_id|ID_MATCH|___check_type_id|TYPE_MATCH",
     "a different object was passed or read than at compile time (a new list, module or optimizer each step): "
     "create it once and reuse it"),
    (r"is_last_batch|sanity_checking|\btraining\b|== (True|False)\b",
     "a branch on a flag compiles each side once; if it flips often, compute both sides and select with "
     "torch.where, or move the branch to a hook"),
    (r"(<|>|!=)=?\s*-?\d",
     "a branch on a changing Python number (an epoch or step threshold) flipped: each side compiles once; to "
     "avoid even that, schedule with arithmetic (min/max, a tensor mask) instead of an if"),
    (r"==\s*-?\d+\.\d+(e-?\d+)?\b",
     "a Python float that changes (a learning rate, a schedule value) is a constant in the graph: pass it as "
     "a tensor (register_buffer or torch.tensor), or set dynamic.specialize_float=false"),
    (r"==\s*-?\d+\b",
     "a Python int read in the step changes: keep counters in a tensor (register_buffer), read Lightning's "
     "(self.global_step, self.current_epoch, batch_idx: runner makes those graph inputs), or make the int an "
     "argument of the compiled function"),
)

_GENERIC_BREAK = ("move that code out of training_step into a Lightning hook (on_train_batch_start/end), or "
                  "set compile.fullgraph=true to turn every break into an error at its line")
_GENERIC_RECOMPILE = ("make the value the guard checks stable between steps (a tensor instead of a Python value, "
                      "a fixed shape), or raise dynamic.recompile_limit if every variant is needed")

_LOCATION_RE = re.compile(r"#\s*(?:[^#]*#\s*)?(?P<file>[^\s#]+\.py):(?P<line>\d+)")


def _in_library(where: str | None, library: str) -> bool:
    """Whether ``where`` is inside the installed package ``library`` (or a path relative to it)."""
    path = (where or "").replace("\\", "/")
    return any(f"{d}{library}/" in path for d in _LIBRARY_DIRS) or path.startswith(f"{library}/")


def runners_site(where: str) -> str:
    """``where`` (file:line) labelled as a break in torch's optimizer step that runner compiled."""
    return f"{where} ({RUNNERS_OPTIMIZER_STEP})"


def is_runners(where: str | None) -> bool:
    """Whether a graph break at ``where`` is runner's own (see :func:`runners_site`), not the user's to fix."""
    return (where or "").endswith(f"({RUNNERS_OPTIMIZER_STEP})")


def fix_label(where: str | None) -> str:
    """How a break's advice is introduced: ``Fix`` for the user's, ``Expected`` for runner's own."""
    return "Expected" if is_runners(where) else "Fix"


def runners_breaks(figures: dict[str, Any]) -> int:
    """How many of the run's graph-break sites are runner's own (counted in ``compile/graph_breaks``)."""
    return sum(1 for b in figures.get("compile/graph_break_reasons") or [] if is_runners(b.get("user_frame")))


def guard_location(reason: str) -> str | None:
    """The ``file:line`` a recompile reason points at (torch appends ``# code  # file:line in fn``)."""
    match = _LOCATION_RE.search(reason.splitlines()[0] if reason else "")
    return f"{match['file']}:{match['line']}" if match else None


def graph_break_fix(reason: str, where: str | None = None) -> str:
    """The suggested fix for a graph break with torch's ``reason`` at the user's ``where`` (file:line)."""
    if is_runners(where):
        return _EXPECTED_BREAK
    if _in_library(where, "torchmetrics"):
        return ("a torchmetrics object runs inside the graph: register it on the LightningModule (an attribute, "
                "a MetricCollection or nn.ModuleDict, not a plain list or dict) so runner runs it after the step, "
                "or use torchmetrics.functional")
    if _in_library(where, "lightning"):
        return ("Lightning's machinery is traced from inside the step: call it from a hook instead (runner "
                "defers self.log/self.log_dict and compiles manual-optimization modules' submodules only)")
    for pattern, fix in _BREAK_RULES:
        if re.search(pattern, reason, re.IGNORECASE):
            return fix
    return _GENERIC_BREAK


def recompile_fix(reason: str, where: str | None = None, batches: Batches = UNKNOWN_BATCHES) -> str:
    """The suggested fix for a recompile whose failed guard is ``reason`` (torch's text), for ``batches``."""
    if re.search(_SHAPE_RULE, reason.split("#", 1)[0], re.IGNORECASE):
        return shape_fix(reason, batches)
    for pattern, fix in _RECOMPILE_RULES:
        if re.search(pattern, reason.split("#", 1)[0], re.IGNORECASE):
            return fix
    return _GENERIC_RECOMPILE


def advise(kind: str, reason: str, where: str | None = None, batches: Batches = UNKNOWN_BATCHES) -> Advice:
    """``kind`` is ``graph_break`` or ``recompile``; ``where`` defaults to the location in the reason."""
    first = next((ln.strip() for ln in reason.splitlines() if ln.strip()), "unknown")
    if kind == "graph_break":
        return Advice(kind, where, first, graph_break_fix(reason, where))
    if kind == "recompile":
        where = where or guard_location(reason)
        return Advice(kind, where, first.split("#", 1)[0].strip() or first, recompile_fix(reason, where, batches))
    raise ValueError(f"kind must be 'graph_break' or 'recompile', not {kind!r}")


def advice_lines(figures: dict[str, Any], limit: int = 5, batches: Batches = UNKNOWN_BATCHES) -> list[str]:
    """One console line per graph-break site of the user's and per recompile after the first step, with
    its fix (runner's own breaks, in the optimizer step it compiled, are in the report, not warned of)."""
    breaks = [b for b in figures.get("compile/graph_break_reasons") or [] if not is_runners(b.get("user_frame"))]
    recompiles = [r for r in figures.get("compile/recompile_reasons") or [] if (r.get("step") or 0) > 0]
    lines = [str(advise("graph_break", str(b.get("reason")), b.get("user_frame"))) for b in breaks[:limit]]
    lines += [str(advise("recompile", str(r.get("reason")), guard_location(str(r.get("reason"))) or r.get("location"),
                         batches)) for r in recompiles[:limit]]
    return lines
