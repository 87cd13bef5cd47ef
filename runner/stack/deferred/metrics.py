"""Which metric objects' methods the compiled step defers (see ``runner.stack.deferred.log``).

Every torchmetrics ``Metric`` and ``MetricCollection`` the LightningModule holds: calling one
(``self.train_acc(preds, y)``), ``update``, ``compute`` and ``reset`` inside the compiled
``training_step`` are recorded and run eagerly right after it, so the graph computes only the model's
tensors. Why not compile them: ``Metric.forward`` swaps its state in and out and branches on data
(``torchmetrics/aggregation.py``, ``stat_scores.py``), so Dynamo graph-breaks inside it and, because
the continuation frames are shared by every metric, recompiles on ``len(args)`` guards until it hits
``recompile_limit`` and silently runs eagerly (issue 15: 19 graphs, 14 breaks, 8 recompiles for the
template MNIST module). Deferred, the same module compiles to one graph, and each metric update costs
what it costs in eager Lightning (measured in ``benchmarks/idioms.py``).
"""

from __future__ import annotations

from typing import Any

from torch import nn

METRIC_METHODS = ("forward", "update", "compute", "reset")


def metric_methods(module: nn.Module) -> list[tuple[Any, tuple[str, ...]]]:
    """``(metric, METRIC_METHODS)`` for every torchmetrics object registered in ``module``, but those on
    which the user set one of these methods themselves (a ``Mock`` recording calls, a wrapper): that
    object is the user's to call when they call it, so such a metric is left alone."""
    try:
        from torchmetrics import Metric, MetricCollection
    except ImportError:  # torchmetrics is optional for runner (Lightning installs it)
        return []
    return [(m, METRIC_METHODS) for m in module.modules() if isinstance(m, (Metric, MetricCollection))
            and not any(_set_by_user(vars(m).get(name)) for name in METRIC_METHODS)]


def _set_by_user(value: object) -> bool:
    # torchmetrics itself puts wrapped ``update``/``compute`` on every instance; anything else is the user's.
    return value is not None and not str(getattr(value, "__module__", "") or "").startswith("torchmetrics")
