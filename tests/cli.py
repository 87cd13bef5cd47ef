"""``python -m runner ARGS`` run inside the test process, for commands that end before a run starts: refusals
(exit 2), ``--cfg``, ``--help``, ``--info``, ``--list-recipes``. No tests here.

It calls the same entry point a process does (``runner.__main__.main``) with ``sys.argv``, the working
directory and ``sys.path`` as a fresh ``python -m runner`` has them, captures what it prints, turns its
``SystemExit`` into the exit code, and puts every process-wide thing it changed back (the directory, ``sys.path``,
``sys.argv``, the config directories, Hydra's global state). A real process costs 3-5 s of imports before it
refuses anything; the behaviour that only a process has (an exit code with no traceback printed by the
interpreter, nothing written to the directory it ran in) is still checked by a few real processes
(``tests/test_bad_input.py``, ``tests/test_cli.py``).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Outcome:
    """What the command did: ``subprocess.CompletedProcess``'s fields the tests read."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path, env: dict[str, str | None] | None = None) -> Outcome:
    """``python -m runner *args`` in ``cwd``, in this process; ``env`` sets (a string) or removes (None) variables."""
    from hydra.core.global_hydra import GlobalHydra

    from runner.__main__ import main
    from runner.config.composing.layers import set_config_dirs

    saved_argv, saved_path, saved_cwd = sys.argv, list(sys.path), os.getcwd()
    saved_env = {k: os.environ.get(k) for k in env or {}}
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.chdir(cwd)
        for k, v in (env or {}).items():
            _set_env(k, v)
        sys.argv = ["runner", *args]
        sys.path.insert(0, str(cwd))  # what `python -m` puts first
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        sys.argv, sys.path[:] = saved_argv, saved_path
        for k, v in saved_env.items():
            _set_env(k, v)
        set_config_dirs([])
        GlobalHydra.instance().clear()
    return Outcome(code, out.getvalue(), err.getvalue())


def _set_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
