"""Bookkeeping inside a compiled ``training_step`` without graph breaks: ``self.log``/``self.log_dict`` and the methods
of metric objects, recorded during the step and replayed eagerly after it, in order."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import lightning as L
import torch
from torch import nn

METRIC_METHODS = ("forward", "update", "compute", "reset")


def metric_methods(module: nn.Module) -> list[tuple[Any, tuple[str, ...]]]:
    """``(metric, METRIC_METHODS)`` for every torchmetrics object registered in ``module``, but those on which the
    user set one of these methods themselves (a ``Mock``, a wrapper): the user's to call when they call it."""
    try:
        from torchmetrics import Metric, MetricCollection
    except ImportError:  # torchmetrics is optional for runner (Lightning installs it)
        return []
    return [(m, METRIC_METHODS) for m in module.modules() if isinstance(m, (Metric, MetricCollection))
            and not any(_set_by_user(vars(m).get(name)) for name in METRIC_METHODS)]


def _set_by_user(value: object) -> bool:
    # torchmetrics itself puts wrapped ``update``/``compute`` on every instance; anything else is the user's.
    return value is not None and not str(getattr(value, "__module__", "") or "").startswith("torchmetrics")


class Box:
    """Holds the real list; a compiled step records it as a call target without reading it."""

    __slots__ = ("value",)

    def __init__(self, value: list[Any]) -> None:
        self.value = value

    def __getattr__(self, name: str) -> Any:  # replay: box.append(x) is the real list's append
        return getattr(self.value, name)


# Lightning's docs teach steps that keep Python state: self.training_step_outputs.append(loss), loss histories, the
# learning rate read through trainer.optimizers. Dynamo guards a list's length and every value of an optimizer's
# param groups, which fail on the next step: a recompile every step until recompile_limit. So, around the compiled
# step only, each list attribute is a DeferredList (mutations recorded and applied after the step; the real list in a
# Box that Dynamo opens only when the step reads it) and each optimizer an OptimizerView (the same param_groups dicts,
# so a read is one float, which specialize_float=False makes a graph input once it changes).
class DeferredList:
    """Stands in for a ``list`` attribute of the LightningModule while the compiled step runs."""

    def __init__(self, calls: list[Any], name: str) -> None:
        self._calls = calls  # DeferredLog's list: log calls and list mutations replay in one order
        self._box = Box([])
        self._name = name

    def _record(self, method: str, *args: Any) -> None:
        self._calls.append((self._box, method, args, {}, None))

    def append(self, value: Any) -> None:
        self._record("append", value)

    def extend(self, values: Any) -> None:
        self._record("extend", list(values))

    def insert(self, index: int, value: Any) -> None:
        self._record("insert", index, value)

    def clear(self) -> None:
        self._record("clear")

    def remove(self, value: Any) -> None:
        self._record("remove", value)

    def __iadd__(self, values: Any) -> DeferredList:
        self.extend(values)
        return self

    def pop(self, index: int = -1) -> Any:
        value = self._view()[index]
        self._record("pop", index)
        return value

    def _view(self) -> list[Any]:
        """The real list as it will be after this step's mutations so far: what every read reads."""
        items = list(self._box.value)
        for target, method, args, _, _ in self._calls:
            if target is self._box:
                getattr(items, method)(*args)
        return items

    def __len__(self) -> int:
        return len(self._view())

    def __getitem__(self, index: Any) -> Any:
        return self._view()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._view())

    def __contains__(self, value: Any) -> bool:
        return value in self._view()

    def __bool__(self) -> bool:
        return bool(self._view())

    def __repr__(self) -> str:
        return repr(self._view())

    def count(self, value: Any) -> int:
        return self._view().count(value)

    def index(self, value: Any) -> int:
        return self._view().index(value)

    def copy(self) -> list[Any]:
        return self._view()


class OptimizerView:
    """Stands in for an optimizer in the strategy's lists while the compiled step runs."""

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer
        self.param_groups: list[dict[str, Any]] = optimizer.param_groups

    def refresh(self) -> None:
        """Follow the optimizer's current groups (``load_state_dict`` on resume replaces the list)."""
        self.param_groups = self._optimizer.param_groups

    def __getattr__(self, name: str) -> Any:  # only attributes the view does not have get here
        return getattr(self._optimizer, name)


DeferredMethods = Iterable[tuple[Any, Iterable[str]]]

_MISSING = object()
_RETURNS_NOTHING = frozenset({"update", "reset", "log", "log_dict", "print"})


class DeferredValueError(TypeError):
    """A deferred call's result was used in the step's computation."""


class Deferred:
    """The result of a call deferred to after the compiled step: filled in when it is replayed."""

    def __init__(self, call: str) -> None:
        self.call = call
        self.value: Any = None

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise DeferredValueError(
            f"{self.call} inside a compiled training_step runs after the step (runner defers metric "
            "bookkeeping out of the graph), so its result cannot be used in the step's computation. Compute "
            "that value with tensor ops (e.g. torchmetrics.functional) in the step, or use it in "
            "on_train_batch_end; logging it with self.log or returning it from the step works as is."
        )

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __float__ = __int__ = __neg__ = __getitem__ = _refuse

    def __getattr__(self, name: str) -> Any:  # .item(), .float(), ...: only missing attributes get here
        if name.startswith("__"):
            raise AttributeError(name)  # copy/pickle protocol probes
        return self._refuse()

    def __repr__(self) -> str:
        return f"Deferred({self.call})"


class _Recorder:
    """Stands in for ``target.<method>`` during a compiled step: records the call, returns a placeholder."""

    def __init__(self, calls: list[Any], target: Any, method: str) -> None:
        self.calls = calls
        self.target = target
        # A module's forward is replayed through __call__, so its hooks run as they would eagerly.
        self.replay = "__call__" if method == "forward" and isinstance(target, torch.nn.Module) else method
        self.returns = method not in _RETURNS_NOTHING
        self.label = f"{type(target).__name__}.{method}(...)"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = Deferred(self.label) if self.returns else None
        self.calls.append((self.target, self.replay, args, kwargs, result))
        return result


# LightningModule.log inspects its caller and touches trainer state, which Dynamo cannot trace
# (InternalTorchDynamoError on torch 2.13, or a graph break per call under torch.compiler.disable); torchmetrics'
# Metric.forward breaks on data-dependent branches and recompiles on len(args) guards (issue 15: 19 graphs, 14 breaks
# for a template MNIST module). So while the compiled step runs each such method is a recorder that appends
# (object, method, args, kwargs) to one list, a side effect Dynamo replays after the graph; after the step the
# originals run eagerly in the step's order (a metric updated before self.log reads it, as eagerly). The recorders
# are made once per run, so they add no guard that can fail. A call that returns (metric.compute()) returns a
# Deferred, real once replayed: it can be logged or returned, not computed with.
class DeferredLog:
    """Records ``log``/``log_dict`` and the bound metric methods during a compiled step; replays them."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, str, tuple[Any, ...], dict[str, Any], Deferred | None]] = []
        self._patches: list[tuple[Any, str, Any]] = []  # (an object's __dict__, name, recorder)
        self._bound: int | None = None
        self._detach_in_step = False  # the rest of the state is bind's

    def log(self, name: str, value: Any, **kwargs: Any) -> None:
        # Detached at replay, not here: a detach inside the compiled step is a second graph output
        # aliasing the loss, which AOTAutograd rebuilds by view replay on every step. Unless the
        # step's graph runs backward itself: then the loss's grad_fn is consumed inside it.
        if self._detach_in_step:
            value = _detached(value)
        self.calls.append((self._module, "log", (name, value), kwargs, None))

    def log_dict(self, dictionary: Any, **kwargs: Any) -> None:
        if self._detach_in_step and type(dictionary) is dict:  # a MetricCollection is logged as it is
            dictionary = {k: _detached(v) for k, v in dictionary.items()}
        self.calls.append((self._module, "log_dict", (dictionary,), kwargs, None))

    def print(self, *args: Any, **kwargs: Any) -> None:
        # ``self.print`` writes through the progress bar (Python I/O Dynamo cannot trace): after the step.
        self.calls.append((self._module, "print", args, kwargs, None))

    def bind(self, module: L.LightningModule, methods: DeferredMethods = (), detach_in_step: bool = False,
             optimizer_lists: Iterable[tuple[dict[str, Any], str]] = (),
             module_optimizers: Callable[[], list[Any]] | None = None) -> None:
        """Defer ``module.log``/``log_dict``, ``methods`` and the module's list mutations; show the step
        ``OptimizerView``s in ``optimizer_lists`` (``(obj.__dict__, name)``). The recorders are built here, once."""
        self._module = module
        self._detach_in_step = detach_in_step
        self._bound = id(module)
        # Instance attributes set through ``__dict__``: ``nn.Module.__setattr__``/``__delattr__`` would
        # search the parameter, buffer and module registries on every step for nothing.
        self._patches = [(vars(module), "log", self.log), (vars(module), "log_dict", self.log_dict),
                         (vars(module), "print", self.print)]
        for target, names in methods:
            for name in names:
                if getattr(target, name, None) is not None:
                    self._patches.append((vars(target), name, _Recorder(self.calls, target, name)))
        self._lists: dict[str, DeferredList] = {}
        self._optimizer_lists = list(optimizer_lists)
        self._views: dict[int, OptimizerView] = {}
        self._view_lists: dict[str, list[OptimizerView]] = {}
        self._module_optimizers = module_optimizers
        if module_optimizers is not None:  # LightningModule.optimizers() in the step, over the views prepared before it
            def optimizers(use_pl_optimizer: bool = True) -> Any:
                shown = self._view_lists.get("_module" if use_pl_optimizer else "_optimizers", [])
                return shown[0] if len(shown) == 1 else shown  # one optimizer is returned as itself, as Lightning's

            self._patches.append((vars(module), "optimizers", optimizers))

    def _state_patches(self, module: Any) -> list[tuple[dict[str, Any], str, Any]]:
        """The stand-ins for the module's and the strategy's lists (the same objects every step: no guard fails)."""
        attrs = vars(module)
        patches: list[tuple[dict[str, Any], str, Any]] = []
        for name, value in attrs.items():
            if type(value) is list:
                proxy = self._lists.get(name)
                if proxy is None:
                    proxy = self._lists[name] = DeferredList(self.calls, name)
                proxy._box.value = value  # the list the attribute holds now (rebound between epochs)
                patches.append((attrs, name, proxy))
        for holder, name in self._optimizer_lists:
            views = [self._view(opt) for opt in holder.get(name) or ()]
            shown = self._view_lists.setdefault(name, [])
            shown[:] = views  # one list object per name, refilled: the step sees the same list every step
            patches.append((holder, name, shown))
        if self._module_optimizers is not None:  # what self.optimizers() returns in the step, prepared here
            self._view_lists.setdefault("_module", [])[:] = [self._view(o) for o in self._module_optimizers()]
        return patches

    def _view(self, optimizer: Any) -> OptimizerView:
        view = self._views.get(id(optimizer))
        if view is None:
            view = self._views[id(optimizer)] = OptimizerView(optimizer)
        view.refresh()
        return view

    @contextlib.contextmanager
    def capture(self, module: L.LightningModule) -> Iterator[None]:
        """Swap the deferred methods and state for their recorders, then put them back and replay the calls."""
        if self._bound != id(module):
            self.bind(module, detach_in_step=self._detach_in_step)
        try:
            with swapped([*self._patches, *self._state_patches(module)]):
                yield
        finally:
            calls = self.calls[:]
            self.calls.clear()  # the recorders hold this list: clear it in place (also when the step raised)
        for target, method, args, kwargs, result in calls:
            resolve = _logged if method in ("log", "log_dict") else _resolve
            value = getattr(target, method)(*map(resolve, args), **{k: _resolve(v) for k, v in kwargs.items()})
            if result is not None:
                result.value = value

    @staticmethod
    def resolve(output: Any) -> Any:
        """The step's output with deferred results replaced by their values (after ``capture``)."""
        return _resolve(output)


def _detached(value: Any) -> Any:
    # Detached, as Lightning would: a logged tensor must not keep the step's autograd graph alive
    # (and under scope=step_backward its grad_fn has already been consumed).
    return value.detach() if isinstance(value, torch.Tensor) else value


def _logged(value: Any) -> Any:
    """A ``log``/``log_dict`` argument, resolved and detached (a MetricCollection is logged as it is)."""
    value = _resolve(value)
    if type(value) is dict:
        return {k: _detached(v) for k, v in value.items()}
    return _detached(value)


def _resolve(value: Any) -> Any:
    if isinstance(value, Deferred):
        return value.value
    if isinstance(value, Mapping) and any(isinstance(v, Deferred) for v in value.values()):
        return {k: _resolve(v) for k, v in value.items()}
    return value


def _ignore(*args: Any, **kwargs: Any) -> None:
    """Stands in for ``log``/``log_dict`` (and metric methods) where nothing should be recorded."""


@contextlib.contextmanager
def swapped(patches: list[tuple[dict[str, Any], str, Any]]) -> Iterator[None]:
    """``attrs[name] = value`` for each patch, then each attribute as it was (one the block rebound keeps its value)."""
    prior = [attrs.get(name, _MISSING) for attrs, name, _ in patches]
    for attrs, name, value in patches:
        attrs[name] = value
    try:
        yield
    finally:
        for (attrs, name, value), before in zip(patches, prior, strict=True):
            if attrs.get(name, _MISSING) is not value:
                continue
            if before is _MISSING:
                del attrs[name]  # back to the class's method
            else:
                attrs[name] = before


def discard_logs(module: Any, methods: DeferredMethods = ()) -> contextlib.AbstractContextManager[None]:
    """The module's ``log``/``log_dict``/``print`` and ``methods`` as no-ops: a measurement outside any Trainer."""
    patches = [(vars(module), name, _ignore) for name in ("log", "log_dict", "print")]
    patches += [(vars(target), name, _ignore) for target, names in methods for name in names]
    return swapped(patches)
