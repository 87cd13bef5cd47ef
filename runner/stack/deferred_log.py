"""``self.log`` inside a compiled ``training_step`` without graph breaks.

Lightning's ``LightningModule.log`` inspects the caller and touches trainer state, which Dynamo
cannot trace (``InternalTorchDynamoError`` in torch 2.13, or a graph break per call when wrapped in
``torch.compiler.disable``). While the compiled step runs, ``log``/``log_dict`` are swapped for a
recorder that only appends ``(name, value, kwargs)`` to a list: Dynamo traces that as a side effect
and replays it after the graph. The strategy then replays each call through the real ``log``
eagerly, outside the compiled region. The recorder object is the same every step, so it adds no
guard that can fail.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import lightning as L
import torch


class DeferredLog:
    """Records ``log``/``log_dict`` calls during a compiled step and replays them afterwards."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []

    def log(self, name: str, value: Any, **kwargs: Any) -> None:
        # Detached, as Lightning would: a logged tensor must not keep the step's autograd graph alive
        # (and under scope=step_backward its grad_fn has already been consumed).
        self.calls.append((name, value.detach() if isinstance(value, torch.Tensor) else value, kwargs))

    def log_dict(self, dictionary: Any, **kwargs: Any) -> None:
        for name, value in dictionary.items():
            self.log(name, value, **kwargs)

    @contextlib.contextmanager
    def capture(self, module: L.LightningModule) -> Iterator[None]:
        """Swap the module's ``log``/``log_dict`` for the recorder, then replay the calls."""
        # Instance attributes set through ``__dict__``: ``nn.Module.__setattr__``/``__delattr__`` would
        # search the parameter, buffer and module registries on every step for nothing.
        attrs = vars(module)
        attrs["log"], attrs["log_dict"] = self.log, self.log_dict
        try:
            yield
        finally:
            del attrs["log"], attrs["log_dict"]  # back to the class's methods
        calls, self.calls = self.calls, []
        for name, value, kwargs in calls:
            module.log(name, value, **kwargs)


def _ignore(*args: Any, **kwargs: Any) -> None:
    """Stands in for ``log``/``log_dict`` where nothing should be logged."""


@contextlib.contextmanager
def discard_logs(module: Any) -> Iterator[None]:
    """Run the module's step with ``log``/``log_dict`` as no-ops (a measurement outside any Trainer)."""
    attrs = vars(module)
    attrs["log"], attrs["log_dict"] = _ignore, _ignore
    try:
        yield
    finally:
        del attrs["log"], attrs["log_dict"]
