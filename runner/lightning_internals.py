"""Every private part of Lightning runner touches, one function each: the bottom layer's Lightning door.

Lightning changes faster than torch's compile internals, so nothing private of it is reached anywhere
else in runner, and nothing here is imported before it is used: ``import runner`` never imports a
private Lightning module, and a Lightning refactor turns a fast path off with one warning (or fails one
named test, ``tests/test_lightning_internals.py``, which pins every name below on the installed
Lightning) instead of breaking the product.

Pinned against lightning 2.6.6 (2.5 has the same names).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

log = logging.getLogger(__name__)

FIT_LOOP_STATE = r"\._trainer\.fit_loop\..*"
"""Below ``LightningModule._trainer``: every counter Lightning's ``current_epoch``/``global_step``
properties and the trainer's progress flags read (``fit_loop.epoch_progress.current.completed``,
``fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed``...)."""

_OPTIMIZER_LISTS = ("_optimizers",)
"""The strategy's list a ``training_step`` reaches through ``self.trainer.optimizers`` (``Strategy.optimizers``,
strategies/strategy.py); ``self.optimizers()`` reads ``_lightning_optimizers`` (:func:`lightning_optimizers`)."""


# -- self.log's per-call metric walk (logger_connector/result.py) -------------------------------------
def result_metric_class() -> Any | None:
    """``_ResultMetric``, the class every ``self.log`` value is kept in; None (with one warning) when
    this Lightning has none: runner's log fast path is then off and logging works as Lightning's."""
    try:
        from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric
    except ImportError:  # pragma: no cover - a Lightning without it
        warnings.warn("this Lightning has no _ResultMetric: runner's self.log fast path is off", stacklevel=2)
        return None
    return _ResultMetric


RESULT_METRIC_STATES = ("value", "cumulated_batch_size")
"""The tensor states ``_ResultMetric`` adds (its ``__init__``)."""


# -- strategies -------------------------------------------------------------------------------------
def optimizer_lists(strategy: Any) -> list[tuple[dict[str, Any], str]]:
    """``(strategy.__dict__, name)`` of each list of optimizers the strategy hands a training step."""
    attrs = vars(strategy)
    return [(attrs, name) for name in _OPTIMIZER_LISTS if isinstance(attrs.get(name), list)]


def lightning_optimizers(strategy: Any) -> list[Any]:
    """The ``LightningOptimizer`` wrappers ``LightningModule.optimizers()`` returns (one per optimizer)."""
    return list(strategy._lightning_optimizers)


def set_pure_data_parallel(strategy: Any) -> None:
    """``ModelParallelStrategy`` with every process one data-parallel shard (its ``"auto"`` would make
    the in-node dimension tensor-parallel, model_parallel.py ``setup_environment``)."""
    strategy._data_parallel_size = strategy.num_nodes * strategy.num_processes
    strategy._tensor_parallel_size = 1


def saves_distributed_checkpoint(strategy: Any) -> bool:
    """Whether a ``ModelParallelStrategy`` writes sharded (distributed) checkpoints."""
    return bool(strategy._save_distributed_checkpoint)


# -- loggers and progress bars ---------------------------------------------------------------------------
def started_wandb_run(logger: Any) -> Any | None:
    """A ``WandbLogger``'s run if it was started (reading ``logger.experiment`` would start one)."""
    return getattr(logger, "_experiment", None)


def set_logger_experiment(logger: Any, experiment: Any) -> None:
    """Give a logger its experiment object before it builds its own: ``CSVLogger.experiment`` returns
    ``logger._experiment`` once set (runner's durable CSV writer replaces Lightning's, which deletes
    ``metrics.csv`` when it starts in a directory holding files)."""
    logger._experiment = experiment


def wandb_init_kwargs(logger: Any) -> dict[str, Any] | None:
    """The keyword arguments a ``WandbLogger`` will pass to ``wandb.init`` (editable until it starts)."""
    init = getattr(logger, "_wandb_init", None)
    return init if isinstance(init, dict) else None


RICH_BAR_OVERRIDES = ("_get_train_description", "_update")
"""``RichProgressBar`` methods runner's bar overrides (``runner.training.progress_bar``): the training
bar's label, and the one place that sets a bar's count. If a Lightning release renames them, runner's
bar shows Lightning's label and count again (nothing breaks); the pin test names the change."""
