"""runner's quiet console: the filters apply to runner's own command line only and are restored;
a user's own Trainer keeps every warning; runner's wandb logger prints none of wandb's end-of-run
tables; console lines are short while the run's log file keeps the details."""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import pytest
from lightning.pytorch.callbacks import Callback

from runner.config.schema import Scope
from runner.quiet import quiet_third_party, quiet_wandb, short_console_lines
from tests.helpers import fit_losses

LEAFSPEC = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."
TIP = "💡 Tip: For seamless cloud logging and experiment tracking, try installing litlogger"


def _lightning_warning(message: str, module: str) -> list[str]:
    """Messages shown when ``module`` warns ``message`` (the module a filter matches on)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_third_party():
            warnings.warn_explicit(message, DeprecationWarning, "x.py", 1, module=module)
            warnings.warn_explicit("mine", UserWarning, "y.py", 1, module="my_project.train")
    return [str(w.message) for w in seen]


def test_quiet_third_party_drops_only_the_known_noise_and_restores_everything() -> None:
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    filters, logger_filters = list(warnings.filters), list(rank_zero.filters)
    # Lightning's LeafSpec deprecation is dropped; the same text from another module, and the user's own, are not.
    assert _lightning_warning(LEAFSPEC, "lightning.pytorch.utilities._pytree") == ["mine"]
    assert _lightning_warning(LEAFSPEC, "my_project.tree") == [LEAFSPEC, "mine"]
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    rank_zero.addHandler(handler)
    try:
        with quiet_third_party():
            rank_zero.info(TIP)
            rank_zero.info("GPU available: False, used: False")
        rank_zero.info(TIP)
    finally:
        rank_zero.removeHandler(handler)
    assert records == ["GPU available: False, used: False", TIP]
    assert warnings.filters == filters and rank_zero.filters == logger_filters


class _UserWarns(Callback):
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        warnings.warn("the user's own warning", UserWarning, stacklevel=1)


def test_a_users_own_trainer_keeps_every_warning() -> None:
    """CompileStrategy in a plain Trainer installs no filter: the user's warning reaches the user."""
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    filters, logger_filters = list(warnings.filters), list(rank_zero.filters)
    with pytest.warns(UserWarning, match="the user's own warning"):
        fit_losses(scope=Scope.step, backend="eager", steps=2, callbacks=[_UserWarns()])
    assert warnings.filters == filters and rank_zero.filters == logger_filters


def test_console_shows_the_first_line_and_the_log_file_every_line(tmp_path: Path) -> None:
    root = logging.getLogger()
    console, log_file = io.StringIO(), tmp_path / "run.log"
    stream, file = logging.StreamHandler(console), logging.FileHandler(log_file)
    formatter = logging.Formatter("[%(name)s] %(message)s")
    for h in (stream, file):
        h.setFormatter(formatter)
        root.addHandler(h)
    level = root.level
    root.setLevel(logging.INFO)  # setLevel, not .level: loggers cache their effective level
    log = logging.getLogger("runner.stack.compile_stack")
    try:
        with short_console_lines():
            log.info("compile stack: scope=%s\n  optimizer: %s", "step", "a long reason")
            logging.getLogger("my_project").info("theirs\nsecond line")
        log.info("after\nthe details")
    finally:
        root.removeHandler(stream)
        root.removeHandler(file)
        file.close()
        root.setLevel(level)
    assert console.getvalue().splitlines() == [
        "[runner.stack.compile_stack] compile stack: scope=step", "[my_project] theirs", "second line",
        "[runner.stack.compile_stack] after", "the details"]
    assert "  optimizer: a long reason" in log_file.read_text()
    assert stream.formatter is formatter


@pytest.mark.slow
def test_runners_wandb_logger_prints_no_tables_and_no_false_warning(tmp_path: Path,
                                                                     capfd: pytest.CaptureFixture[str]) -> None:
    from lightning.pytorch.loggers import WandbLogger

    logger = WandbLogger(save_dir=str(tmp_path), project="runner", name="t", offline=True)
    quiet_wandb(logger)
    run: Any = logger.experiment  # starts the offline run
    logger.log_metrics({"compile/time_s": 1.0, "perf/step_ms": 2.0}, step=1)
    run.finish()
    out = capfd.readouterr()
    console = out.out + out.err
    assert "anonymous" not in console and "Run history" not in console and "Run summary" not in console
    assert list(tmp_path.glob("wandb/offline-run-*"))  # wandb's files are written as before
    mine = WandbLogger(save_dir=str(tmp_path), offline=True, settings={"quiet": False})
    quiet_wandb(mine)
    assert mine._wandb_init["settings"] == {"quiet": False}  # a setting the user gave is kept
