"""Every private part of Lightning runner touches, one function each, imported only when used: a Lightning refactor
turns a fast path off with one warning or fails ``tests/test_lightning_internals.py``, never the product (pinned
against lightning 2.6.6; 2.5 has the same names)."""

from __future__ import annotations

import logging
import warnings
from typing import Any

log = logging.getLogger(__name__)

FIT_LOOP_STATE = r"\._trainer\.fit_loop\..*"
"""Below ``LightningModule._trainer``: every counter ``current_epoch``/``global_step`` and the progress flags read."""

_OPTIMIZER_LISTS = ("_optimizers",)  # what self.trainer.optimizers reads (Strategy.optimizers, strategies/strategy.py)


# -- self.log's per-call metric walk (logger_connector/result.py) -------------------------------------
def result_metric_class() -> Any | None:
    """``_ResultMetric``, the class every ``self.log`` value is kept in; None (with one warning) when there is none."""
    try:
        from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric
    except ImportError:  # pragma: no cover - a Lightning without it
        warnings.warn("this Lightning has no _ResultMetric: runner's self.log fast path is off", stacklevel=2)
        return None
    return _ResultMetric


RESULT_METRIC_STATES = ("value", "cumulated_batch_size")  # the tensor states _ResultMetric.__init__ adds


# -- strategies -------------------------------------------------------------------------------------
def optimizer_lists(strategy: Any) -> list[tuple[dict[str, Any], str]]:
    """``(strategy.__dict__, name)`` of each list of optimizers the strategy hands a training step."""
    attrs = vars(strategy)
    return [(attrs, name) for name in _OPTIMIZER_LISTS if isinstance(attrs.get(name), list)]


def lightning_optimizers(strategy: Any) -> list[Any]:
    """The ``LightningOptimizer`` wrappers ``LightningModule.optimizers()`` returns (one per optimizer)."""
    return list(strategy._lightning_optimizers)


def set_pure_data_parallel(strategy: Any) -> None:
    """``ModelParallelStrategy`` with every process a data-parallel shard (its ``"auto"``: tensor-parallel in-node)."""
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
    """Give a logger its experiment before it builds its own (runner's durable CSV writer: Lightning's deletes
    ``metrics.csv`` when it starts in a directory holding files)."""
    logger._experiment = experiment


def wandb_init_kwargs(logger: Any) -> dict[str, Any] | None:
    """The keyword arguments a ``WandbLogger`` will pass to ``wandb.init`` (editable until it starts)."""
    init = getattr(logger, "_wandb_init", None)
    return init if isinstance(init, dict) else None


RICH_BAR_OVERRIDES = ("_get_train_description", "_update")
"""``RichProgressBar`` methods runner's bar overrides (its label and count): renamed, Lightning's show again."""
