"""The compile process beside a run, from the run's side: start it, ask whether it has finished, read what it reports,
stop it. What it runs is ``runner.background_process`` (``python -m runner.background_process``)."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

ENTRY_POINT = "runner.background_process"
LOG_LINES = 12
MAX_MODULE_BYTES = 1 << 30


@dataclass
class ProcessResult:
    """How the compile process ended: ``ok``, its wall time, what it measured, or why it failed."""

    ok: bool
    seconds: float
    measured: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on: ``pinned`` puts the compile process on the highest, ``others`` leaves the
    lowest to the run."""
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else {0}


class CompileProcess:
    """One compile process beside the run (see the module docstring)."""

    def __init__(self, placement: str) -> None:
        self.placement = placement
        self.dir = Path(tempfile.mkdtemp(prefix="runner-compile-"))
        # Removed by stop(), or when this object goes (a setup that raised before any teardown) or at exit.
        self._remove_dir = weakref.finalize(self, shutil.rmtree, str(self.dir), True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started: float | None = None
        self.result: ProcessResult | None = None

    def save_module(self, module: nn.Module) -> list[str]:
        """Write the module (its classes and functions by reference, its tensors by value) for the process
        to load; the names it refers to in ``__main__`` (a script's own classes), which the process cannot
        import (nothing is written then)."""
        in_main: list[str] = []

        class Pickler(pickle.Pickler):
            def reducer_override(self, obj: Any) -> Any:
                if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
                    in_main.append(obj.__qualname__)
                return NotImplemented

        checking = types.ModuleType("pickle")
        checking.Pickler = Pickler  # type: ignore[attr-defined]
        path = self.dir / "module.pt"
        torch.save(module, path, pickle_module=checking)
        if in_main:
            path.unlink()
        return sorted(set(in_main))

    def start(self, batch: Any, payload: dict[str, Any]) -> None:
        """Write the batch and ``payload`` beside the module and start the process."""
        torch.save({**payload, "batch": batch, "sys_path": list(sys.path)}, self.dir / "payload.pt")
        argv = [sys.executable, "-m", ENTRY_POINT, str(self.dir), f"--placement={self.placement}"]
        if self.placement == "pinned":
            argv.append(f"--cpu={max(allowed_cpus())}")
        elif self.placement == "others":
            argv.append(f"--cpu={min(allowed_cpus())}")
        # The run's import path, so the process resolves the module's classes as the run did (a project's
        # own classes on the current directory, tests' packages).
        path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        env = {**os.environ, "PYTHONPATH": path}
        with open(self.dir / "process.log", "wb") as out:
            # Its own session: stop() ends it with its compile workers, and a Ctrl-C meant for the run
            # reaches only the run (whose teardown stops it).
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=os.getcwd(), start_new_session=True)
        self.started = time.perf_counter()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def poll(self) -> ProcessResult | None:
        """The result once the process has exited (None while it runs); one ``waitpid`` per call."""
        if self.result is not None or self.proc is None or self.proc.poll() is None:
            return self.result
        self.result = self._read(self.proc.returncode)
        return self.result

    def wait(self, timeout: float | None = None) -> ProcessResult | None:
        """Block until the process exits (or ``timeout`` seconds pass); its result, if it exited."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        return self.poll()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started if self.started is not None else 0.0

    def _read(self, code: int) -> ProcessResult:
        seconds = self.elapsed()
        try:
            reported = json.loads((self.dir / "result.json").read_text())
        except (OSError, ValueError):
            reported = {}
        if code == 0 and reported.get("ok"):
            return ProcessResult(True, seconds, dict(reported.get("measured") or {}))
        if code < 0:
            why = f"killed by {signal.Signals(-code).name}"
        else:
            why = reported.get("error") or f"exit code {code}: {self._log_tail()}"
        return ProcessResult(False, seconds, error=why)

    def _log_tail(self) -> str:
        try:
            lines = (self.dir / "process.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no output"
        return " | ".join(lines[-LOG_LINES:]) or "no output"

    def stop(self) -> None:
        """Kill the process if it still runs, and remove its directory."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # compile workers it left behind (same session)
        self._remove_dir()


def start_process_for(module: nn.Module, placement: str) -> tuple[CompileProcess | None, tuple[str, str]]:
    """A compile process holding ``module`` (not started yet), or None and why not: (short, sentence)."""
    size = sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    if size > MAX_MODULE_BYTES:
        return None, (f"the module ({size / 2**30:.1f} GiB) is too large to copy",
                      f"the module holds {size / 2**30:.1f} GiB, too much to copy to a compile process")
    process = CompileProcess(placement)
    try:
        in_main = process.save_module(module)
    except Exception as e:  # a module pickle cannot carry (a lambda, a class defined in a function)
        process.stop()
        return None, (f"the module cannot be copied ({type(e).__name__})",
                      f"the module cannot be sent to a compile process ({type(e).__name__}: {e})")
    if in_main:
        process.stop()
        names = ", ".join(in_main)
        return None, (f"{names} defined in __main__", f"{names} is defined in the script run as __main__, which a "
                      "compile process cannot import (a class in a module of its own can go to one)")
    return process, ("", "")
