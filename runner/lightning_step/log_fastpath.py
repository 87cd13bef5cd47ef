"""Lightning's ``self.log`` without its per-call metric walk, while a runner strategy runs a trainer function."""

# Every ``self.log`` call ends in ``_ResultMetric.to(value.device)``, which rebuilds the metric's ``__dict__`` even
# when nothing moves: 0.37-0.62 ms per logged value per step on a 2-core CPU, a third of Lightning's per-step cost on a
# small model (Lightning issue #20388; upstream pull request #21769 is this same early return). runner's strategies
# install it in ``setup_environment`` and put Lightning's method back in ``teardown``.

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runner import lightning_internals as li


def _fast_to(lightning_to: Callable[..., Any]) -> Callable[..., Any]:
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs and len(args) == 1 and isinstance(args[0], (str, torch.device)):
            device = torch.device(args[0])
            value, size = (vars(self).get(name) for name in li.RESULT_METRIC_STATES)
            if isinstance(value, torch.Tensor) and value.device == device and (
                    not isinstance(size, torch.Tensor) or size.device == device):
                return self
        return lightning_to(self, *args, **kwargs)

    to.__wrapped__ = lightning_to  # type: ignore[attr-defined]
    return to


class LogFastPath:
    """Installs the fast ``to`` on ``_ResultMetric`` while at least one strategy holds it (nested holders share it)."""

    _holders = 0
    _lightning_to: Callable[..., Any] | None = None
    _fast: Callable[..., Any] | None = None

    def __init__(self) -> None:
        self.held = False

    def install(self) -> None:
        """Take the fast path until :meth:`restore` (a no-op if Lightning's ``to`` is not the one we know)."""
        if self.held:
            return
        cls = type(self)
        metric = li.result_metric_class()
        if metric is None:
            return
        if cls._holders == 0:
            if cls._lightning_to is None:
                cls._lightning_to = metric.to
                cls._fast = _fast_to(metric.to)
            if metric.to is not cls._lightning_to:
                return  # someone else replaced it: leave theirs alone
            metric.to = cls._fast
        cls._holders += 1
        self.held = True

    def restore(self) -> None:
        """Give the fast path back; the last holder puts Lightning's method back."""
        if not self.held:
            return
        cls = type(self)
        cls._holders -= 1
        self.held = False
        metric = li.result_metric_class()
        if cls._holders == 0 and metric is not None:
            metric.to = cls._lightning_to

    @staticmethod
    def active() -> bool:
        """Whether ``_ResultMetric.to`` is the fast path now."""
        metric = li.result_metric_class()
        return metric is not None and LogFastPath._fast is not None and metric.to is LogFastPath._fast
