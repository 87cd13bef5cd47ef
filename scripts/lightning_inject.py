"""pytest plugin for ``scripts/lightning_suite.py``: puts a strategy into the Trainers Lightning's tests build.

Loaded with ``-p lightning_inject`` (this folder on ``PYTHONPATH``). ``--lsuite-mode`` picks what a Trainer
gets when its test builds a one-device CPU Trainer without choosing a strategy:

- ``plain``: nothing (Lightning as installed); the decisions are still recorded, so both passes list the
  same Trainers as injectable or not;
- ``eager`` / ``inductor``: ``runner.CompileStrategy`` with that ``torch.compile`` backend;
- ``passthrough``: ``PassThroughStrategy``, a ``SingleDeviceStrategy`` subclass that only calls ``super()``.

Every test's outcome, the first line of its error, and each Trainer's decision go to ``--lsuite-report``
(JSON), written at the end of the session.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

MODES = ("plain", "eager", "inductor", "passthrough")

_results: dict[str, dict[str, Any]] = {}
_trainers: dict[str, list[str]] = {}  # nodeid -> one entry per Trainer built: "injected" or why not
_graphs: dict[str, int] = {}  # nodeid -> graphs Dynamo compiled while it ran
_current = "<outside a test>"
_started = time.monotonic()
_restore: Callable[[], None] | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lightning_inject")
    group.addoption("--lsuite-mode", choices=MODES, default="plain", help="what one-device CPU Trainers get")
    group.addoption("--lsuite-report", default=None, help="where to write the JSON report")
    group.addoption("--lsuite-reset-dynamo", action="store_true",
                    help="torch.compiler.reset() before each test (separates leaks between tests from the rest)")


def _strategy_factory(mode: str) -> Callable[[], Any]:
    """A new strategy object per Trainer, for an injecting mode."""
    if mode == "passthrough":
        return _passthrough_strategy
    from runner import Background, CompileConfig, CompileStrategy

    # Compiled from the first step: compile.background=auto would keep these short CPU fits eager.
    return lambda: CompileStrategy(compile=CompileConfig(backend=mode, background=Background.disabled))


def _passthrough_strategy() -> Any:
    from lightning.pytorch.strategies import SingleDeviceStrategy

    class PassThroughStrategy(SingleDeviceStrategy):
        """Overrides what runner's strategy overrides (backward, optimizer_step), adding nothing: a test
        that fails with it fails with any strategy subclass, whatever the subclass does."""

        def backward(self, closure_loss: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            return super().backward(closure_loss, optimizer, *args, **kwargs)

        def optimizer_step(self, optimizer: Any, closure: Any, model: Any = None, **kwargs: Any) -> Any:
            return super().optimizer_step(optimizer, closure, model, **kwargs)

    return PassThroughStrategy(device="cpu")


def why_not_injectable(kwargs: dict[str, Any]) -> str | None:
    """None when a Trainer built with these arguments is a one-device CPU Trainer whose strategy Lightning
    picks; otherwise the reason, one short phrase."""
    from lightning.pytorch.accelerators import CPUAccelerator, cuda, mps

    strategy = kwargs.get("strategy", "auto")
    if strategy not in ("auto", None):
        return f"strategy={strategy if isinstance(strategy, str) else type(strategy).__name__}"
    accelerator = kwargs.get("accelerator", "auto")
    if isinstance(accelerator, CPUAccelerator):
        accelerator = "cpu"
    if accelerator not in ("auto", "cpu"):
        return f"accelerator={accelerator if isinstance(accelerator, str) else type(accelerator).__name__}"
    devices = kwargs.get("devices", "auto")
    if devices not in ("auto", 1, "1"):
        return f"devices={devices!r}"
    if kwargs.get("num_nodes", 1) != 1:
        return f"num_nodes={kwargs['num_nodes']}"
    # Tests mock a GPU count; "auto" would then pick that accelerator, not the CPU.
    if accelerator == "auto" and (cuda.num_cuda_devices() > 0 or mps.MPSAccelerator.is_available()):
        return "a GPU is (mock-)available and accelerator=auto"
    return None


def _install(mode: str) -> Callable[[], None]:
    """Wrap ``Trainer.__init__``; return what undoes it."""
    from lightning.pytorch import Trainer

    original = Trainer.__dict__["__init__"]
    factory = None if mode == "plain" else _strategy_factory(mode)

    @functools.wraps(original)  # Lightning's CLI and argparse helpers read the signature through __wrapped__
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        reason = why_not_injectable(kwargs)
        _trainers.setdefault(_current, []).append(reason or "injected")
        if reason is None and factory is not None:
            kwargs["strategy"] = factory()
        original(self, *args, **kwargs)

    Trainer.__init__ = __init__  # type: ignore[method-assign]
    return lambda: setattr(Trainer, "__init__", original)


def pytest_configure(config: pytest.Config) -> None:
    global _restore
    import lightning

    installed = Path(lightning.__file__).resolve()
    if config.rootpath.resolve() in installed.parents:
        raise pytest.UsageError(f"lightning is imported from the checkout ({installed}), not the installed package: "
                                "run from the checkout's tests/ folder without its src/ on PYTHONPATH.")
    _restore = _install(config.getoption("--lsuite-mode"))


def _graphs_so_far() -> int:
    from torch._dynamo.utils import counters  # not cleared by torch.compiler.reset()

    return int(counters["stats"]["unique_graphs"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Counts the graphs Dynamo compiled during the test: an injected test with none compiled nothing."""
    before = _graphs_so_far()
    try:
        return (yield)
    finally:
        _graphs[item.nodeid] = _graphs_so_far() - before


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _current
    _current = item.nodeid
    if item.config.getoption("--lsuite-reset-dynamo"):
        import torch

        torch.compiler.reset()


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "<no message>")


def _error(report: pytest.TestReport | pytest.CollectReport) -> dict[str, str | None]:
    """The first line of the error pytest shows, and of the first exception of its chain when that differs
    (``pytest.warns``/``raises`` report their own failure over the error that ended the block)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = _first_line(crash.message if crash is not None else str(report.longrepr))
    chain = getattr(report.longrepr, "chain", None) or []
    root = chain[0][1] if len(chain) > 1 else None
    cause = _first_line(root.message) if root is not None else None
    return {"message": message, "cause": cause if cause != message else None}


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _results[report.nodeid] = {"outcome": "error", "when": "collect", **_error(report)}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "rerun":  # pytest-rerunfailures: the next attempt decides
        _results.pop(report.nodeid, None)
        return
    rec = _results.setdefault(report.nodeid, {"outcome": "passed", "when": None, "message": None, "duration_s": 0.0})
    rec["duration_s"] = round(rec["duration_s"] + report.duration, 3)
    if rec["when"] is not None:  # the first thing that went wrong or skipped is the one reported
        return
    if report.failed:
        rec.update(outcome="failed" if report.when == "call" else "error", when=report.when, **_error(report))
    elif report.skipped:
        xfail = hasattr(report, "wasxfail")
        reason = report.wasxfail if xfail else (report.longrepr[2] if isinstance(report.longrepr, tuple)
                                                 else str(report.longrepr))
        rec.update(outcome="xfailed" if xfail else "skipped", when=report.when, message=str(reason))
    elif report.when == "call" and hasattr(report, "wasxfail"):
        rec["outcome"] = "xpassed"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _restore is not None:
        _restore()
    path = session.config.getoption("--lsuite-report")
    if not path:
        return
    import lightning

    for nodeid, trainers in _trainers.items():
        if nodeid in _results:
            _results[nodeid]["trainers"] = trainers
    for nodeid, graphs in _graphs.items():
        if nodeid in _results:
            _results[nodeid]["graphs"] = graphs
    report = {
        "mode": session.config.getoption("--lsuite-mode"),
        "reset_dynamo": session.config.getoption("--lsuite-reset-dynamo"),
        "args": list(session.config.invocation_params.args),
        "lightning": {"version": lightning.__version__, "file": lightning.__file__},
        "runner_file": getattr(sys.modules.get("runner"), "__file__", None),
        "exitstatus": int(exitstatus),
        "wall_s": round(time.monotonic() - _started, 1),
        "tests": _results,
    }
    Path(path).write_text(json.dumps(report, indent=1, sort_keys=True))
