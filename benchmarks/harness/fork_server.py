"""Where the CPU benchmarks' contestant processes come from: multiprocessing's fork server.

The server imports torch, Lightning and runner's strategies once and then only forks, so each contestant is a copy
of an interpreter that has imported and run nothing else: no Dynamo, OpenMP, allocator or cache state of the
driver's or of another contestant's, as with a freshly spawned interpreter, without each contestant spending
5 seconds (2 cores) on those imports. The benchmarks that use it run on the CPU, and importing initialises no CUDA.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

PRELOAD = ["torch", "lightning", "runner.strategy"]
"""By name, not the driver's script: Python 3.11's fork server does not take the driver's sys.path, so it could not
import the script's sibling modules. Each contestant still imports the script itself, as a spawned one does."""


def start() -> BaseContext:
    """Start the fork server; the context contestants are started with (``spawn`` where the server cannot start).

    Call it before moving TMPDIR into a scratch directory the driver removes: the server's socket lives in a
    directory multiprocessing creates in the temporary directory of that moment and removes when the driver
    exits, after any scratch directory is gone."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    try:
        forkserver.ensure_running()
    except OSError as e:  # "AF_UNIX path too long": a temporary directory deeper than about 80 characters
        print(f"contestants start as spawned interpreters, each importing torch and Lightning itself: the fork "
              f"server could not start ({e}); a shorter TMPDIR lets it", file=sys.stderr, flush=True)
        return multiprocessing.get_context("spawn")
    return ctx


def adopt(env: dict[str, str]) -> None:
    """In a contestant, first: the driver's environment when it started this contestant. A forked contestant
    inherits the server's, from before the driver set the run's TMPDIR and Inductor cache directory; torch reads
    both when it uses them, not at import."""
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
