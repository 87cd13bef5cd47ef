"""Lightning's ``self.log`` without its per-call metric walk, while a runner strategy runs a trainer function.

Every ``self.log`` call ends in ``_ResultCollection.log``, which calls ``_ResultMetric.to(value.device)``.
That ``to`` rebuilds the metric's whole ``__dict__`` with ``apply_to_collection`` (deep-copying its
metadata dataclass) even when nothing moves: 0.37-0.62 ms per logged value per step on a 2-core CPU,
a third of Lightning's whole per-step cost on a small model (Lightning issue #20388; the fix proposed
upstream in pull request #21769 is this same early return). Until Lightning ships it, runner's
strategies install it in ``setup_environment`` (fit, validate, test) and put Lightning's method back in
``teardown``.

The early return is taken only for ``to(device)`` when every tensor state of the metric is already on
that device, where the full walk returns an equal metric; any other call runs Lightning's method.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric

_LIGHTNING_TO = _ResultMetric.to
_STATES = ("value", "cumulated_batch_size")  # the tensor states _ResultMetric adds (result.py __init__)


def _to(self: _ResultMetric, *args: Any, **kwargs: Any) -> _ResultMetric:
    if not kwargs and len(args) == 1 and isinstance(args[0], (str, torch.device)):
        device = torch.device(args[0])
        value, size = (vars(self).get(name) for name in _STATES)
        if isinstance(value, torch.Tensor) and value.device == device and (
                not isinstance(size, torch.Tensor) or size.device == device):
            return self
    return _LIGHTNING_TO(self, *args, **kwargs)


class LogFastPath:
    """Installs ``_to`` on ``_ResultMetric`` while at least one strategy holds it (nested holders share it)."""

    _holders = 0

    def __init__(self) -> None:
        self.held = False

    def install(self) -> None:
        """Take the fast path until :meth:`restore` (a no-op if Lightning's ``to`` is not the one we know)."""
        if self.held:
            return
        cls = type(self)
        if cls._holders == 0:
            if _ResultMetric.to is not _LIGHTNING_TO:
                return  # someone else replaced it: leave theirs alone
            _ResultMetric.to = _to  # type: ignore[method-assign]
        cls._holders += 1
        self.held = True

    def restore(self) -> None:
        """Give the fast path back; the last holder puts Lightning's method back."""
        if not self.held:
            return
        cls = type(self)
        cls._holders -= 1
        self.held = False
        if cls._holders == 0:
            _ResultMetric.to = _LIGHTNING_TO  # type: ignore[method-assign]

    @staticmethod
    def active() -> bool:
        """Whether ``_ResultMetric.to`` is the fast path now."""
        return _ResultMetric.to is _to
