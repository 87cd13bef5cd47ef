"""Run a slice of Lightning's own test suite plain and with runner's strategy; print what fails only with runner.

Lightning's PyPI packages do not ship their tests: get a source checkout at the installed version first
(lightning 2.6.6 is installed; the closest tag is 2.6.5, which differs from it only in
``core/saving.py``)::

    git clone --depth 1 --branch 2.6.5 https://github.com/Lightning-AI/pytorch-lightning /tmp/lightning-2.6.5

and a virtual environment with runner plus the packages Lightning's tests import (not runner's own
``.venv``, which stays as CI builds it)::

    python3 -m venv /tmp/venv-lsuite
    /tmp/venv-lsuite/bin/pip install -c constraints.txt -e . pytest-timeout pytest-rerunfailures \\
        cloudpickle scikit-learn psutil pandas tensorboard rich

Then::

    /tmp/venv-lsuite/bin/python scripts/lightning_suite.py /tmp/lightning-2.6.5 [PATHS...] [--backend inductor]

PATHS are relative to ``tests/tests_pytorch`` (default: the slice below). Each pass is one pytest process
run from the checkout's ``tests/`` folder, importing the *installed* lightning; ``lightning_inject.py``
(beside this file) passes ``runner.CompileStrategy`` to every one-device CPU Trainer whose test chose no
strategy. ``--passthrough`` injects a strategy subclass that adds nothing instead: what fails with it
fails with any strategy subclass. Raw reports and logs go to ``--out``.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_SLICE = ["models/test_hooks.py", "loops/", "trainer/optimization/", "trainer/logging_/", "core/",
                 "trainer/flags/"]
INDUCTOR_SLICE = ["models/test_hooks.py"]
FAILED = ("failed", "error")
CLONE = "git clone --depth 1 --branch 2.6.5 https://github.com/Lightning-AI/pytorch-lightning CHECKOUT"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkout", type=Path, help="a Lightning source checkout at the installed version")
    p.add_argument("paths", nargs="*", help=f"test paths under tests/tests_pytorch (default: {' '.join(DEFAULT_SLICE)};"
                                            f" with --backend inductor: {' '.join(INDUCTOR_SLICE)})")
    p.add_argument("--backend", choices=("eager", "inductor"), default="eager", help="runner's torch.compile backend")
    p.add_argument("--passthrough", action="store_true",
                   help="inject a SingleDeviceStrategy subclass that only calls super(), instead of runner's")
    p.add_argument("--reset-dynamo", action="store_true", help="torch.compiler.reset() before each test (both passes)")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "lightning-suite-results",
                   help="folder for the raw reports and logs")
    p.add_argument("--reuse", action="store_true",
                   help="reuse a pass saved in --out that ran the same paths (re-prints without re-running)")
    p.add_argument("--timeout", type=int, default=600, help="pytest-timeout per test, seconds")
    p.add_argument("--pytest-args", default="", help="more pytest arguments for both passes, one string")
    return p.parse_intermixed_args(argv)  # paths may follow options


def check_inputs(args: argparse.Namespace) -> list[str]:
    """The test paths, relative to the checkout's tests/; exits with a clear message on bad input."""
    root = args.checkout / "tests" / "tests_pytorch"
    if not (root / "conftest.py").is_file():
        sys.exit(f"{args.checkout} is not a Lightning source checkout (no tests/tests_pytorch/conftest.py). "
                 f"Get one at the installed version: {CLONE}")
    paths = args.paths or (INDUCTOR_SLICE if args.backend == "inductor" and not args.passthrough else DEFAULT_SLICE)
    out = []
    for raw in paths:
        rel = raw.removeprefix("tests/").removeprefix("tests_pytorch/")
        target = root / rel.split("::")[0]
        if not target.exists():
            near = difflib.get_close_matches(target.name, [p.name for p in target.parent.glob("*")], n=1)
            hint = f" Did you mean {Path(rel).parent / near[0]}?" if near and target.parent.is_dir() else ""
            sys.exit(f"no {rel} under {root}: give paths relative to tests/tests_pytorch, e.g. loops/ or "
                     f"models/test_hooks.py.{hint}")
        out.append(f"tests_pytorch/{rel}")
    for dist in ("timeout", "rerunfailures"):
        try:
            metadata.version(f"pytest-{dist}")
        except metadata.PackageNotFoundError:
            sys.exit(f"pytest-{dist} is missing from {sys.executable}'s environment; Lightning's tests need it and "
                     f"a few more packages: see this script's docstring (python {__file__} --help).")
    version_file = args.checkout / "src" / "version.info"
    tag = version_file.read_text().strip() if version_file.is_file() else "?"
    print(f"installed lightning {metadata.version('lightning')}, checkout {tag}: tests from {root}")
    return out


def run_pass(args: argparse.Namespace, mode: str, paths: list[str]) -> dict[str, Any]:
    """One pytest process over ``paths``; returns its JSON report (reads the saved one with --reuse)."""
    name = pass_name(mode, args.reset_dynamo, paths)
    report, log = args.out / f"{name}.json", args.out / f"{name}.log"
    if args.reuse and (data := saved_pass(report, paths)) is not None:
        print(f"[{name}] reused {report} ({data['wall_s']} s when it ran)")
        return data
    cmd = [sys.executable, "-m", "pytest", *paths, "-p", "no:cacheprovider", "-p", "lightning_inject",
           f"--lsuite-mode={mode}", f"--lsuite-report={report}", f"--junitxml={args.out / f'{name}.xml'}",
           f"--timeout={args.timeout}", "-q", "-rN", "--color=no",
           *(["--lsuite-reset-dynamo"] if args.reset_dynamo else []), *shlex.split(args.pytest_args)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    print(f"[{name}] {shlex.join(cmd)}  (cwd {args.checkout / 'tests'}, log {log})", flush=True)
    start = time.monotonic()
    with log.open("w") as fh:
        rc = subprocess.call(cmd, cwd=args.checkout / "tests", env=env, stdout=fh, stderr=subprocess.STDOUT)
    print(f"[{name}] pytest exit {rc} after {time.monotonic() - start:.0f} s", flush=True)
    if rc not in (0, 1) or not report.is_file():
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        sys.exit(f"pytest did not finish the {name} pass (exit {rc}); the end of {log}:\n{tail}")
    return dict(json.loads(report.read_text()))


def pass_name(mode: str, reset_dynamo: bool, paths: list[str]) -> str:
    """``eager``, ``plain-reset``...; a slice other than the default adds a digest of its paths, so the
    passes of several slices can share one --out folder."""
    name = f"{mode}{'-reset' if reset_dynamo else ''}"
    if paths != [f"tests_pytorch/{p}" for p in DEFAULT_SLICE]:
        name += "-" + hashlib.sha1(" ".join(paths).encode()).hexdigest()[:8]
    return name


def saved_pass(report: Path, paths: list[str]) -> dict[str, Any] | None:
    """The saved JSON report of a pass over the same paths, or None."""
    if not report.is_file():
        return None
    data: dict[str, Any] = json.loads(report.read_text())
    return data if [a for a in data["args"] if a.startswith("tests_pytorch/")] == paths else None


def group_key(message: str) -> str:
    """The first error line with what differs between tests of one cause (addresses, paths, numbers) blanked."""
    message = re.sub(r"0x[0-9a-fA-F]+", "0x…", message)
    message = re.sub(r"(/[\w.+-]+){2,}", "<path>", message)
    message = re.sub(r"[\w.<>]+\.(\w+\(\))", r"….\1", message)  # test-local class names: X.training_step()
    return re.sub(r"\d+(\.\d+)?", "N", message)[:200]


def first_error(test: dict[str, Any]) -> str:
    """The first exception of the error's chain: what went wrong, not ``DID NOT WARN`` around it."""
    return str(test.get("cause") or test["message"] or "")


def totals(data: dict[str, Any]) -> str:
    counts = Counter(t["outcome"] for t in data["tests"].values())
    order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
    return ", ".join(f"{counts[k]} {k}" for k in order if counts[k]) + f"  ({data['wall_s']:.0f} s)"


def _print_groups(title: str, ids: list[str], tests: dict[str, Any], examples: int = 2) -> None:
    groups: dict[str, list[str]] = defaultdict(list)
    for nodeid in ids:
        groups[group_key(first_error(tests[nodeid]))].append(nodeid)
    print(f"\n== {title}: {len(ids)} tests, {len(groups)} causes")
    for _, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        test = tests[members[0]]
        shown = f"   [pytest reports: {test['message']}]" if test.get("cause") else ""
        print(f"{len(members):4d}  {first_error(test)}{shown}")
        for nodeid in members[:examples]:
            print(f"        {nodeid}")


def compare(plain: dict[str, Any], other: dict[str, Any], passthrough: dict[str, Any] | None = None) -> int:
    """Print both passes' totals, what fails only in ``other`` (less what also fails with the pass-through
    strategy, when that pass is given), and the skipped and not-injected tests; return how many fail only
    in ``other``."""
    p, o = plain["tests"], other["tests"]
    label = other["mode"]
    print(f"\nplain: {totals(plain)}\n{label}: {totals(other)}")
    only = sorted(n for n in o if o[n]["outcome"] in FAILED and p.get(n, {}).get("outcome") in ("passed", "xfailed"))
    if passthrough is not None:
        any_subclass = [n for n in only if passthrough["tests"].get(n, {}).get("outcome") in FAILED]
        _print_groups("fail with any strategy subclass (the pass-through one too): left out", any_subclass, o)
        only = [n for n in only if n not in any_subclass]
    _print_groups(f"fail only with {label}", only, o)
    fixed = sorted(n for n in o if o[n]["outcome"] == "passed" and p.get(n, {}).get("outcome") in FAILED)
    both = sorted(n for n in o if o[n]["outcome"] in FAILED and p.get(n, {}).get("outcome") in FAILED)
    print(f"\n== fail in both passes: {len(both)}; pass only with {label}: {len(fixed)}")
    for nodeid in both + fixed:
        plain_error = first_error(p[nodeid])
        print(f"        {nodeid}: plain {p[nodeid]['outcome']}, {label} {o[nodeid]['outcome']}: {plain_error}")
    missing = sorted(set(p) ^ set(o))
    if missing:
        print(f"\n== in one pass only (collection differs): {len(missing)}: {', '.join(missing[:10])}")
    skipped = sorted(n for n in o if o[n]["outcome"] == "skipped" and p.get(n, {}).get("outcome") == "skipped")
    _print_groups("skipped in both passes (fine)", skipped, o, examples=1)
    built = {n: t["trainers"] for n, t in o.items() if t.get("trainers")}
    none = sorted(n for n, tr in built.items() if "injected" not in tr and o[n]["outcome"] != "skipped")
    reasons = Counter(r for n in none for r in set(built[n]))
    print(f"\n== tests that built a Trainer: {len(built)}; with none injected (ran all the same): {len(none)}; "
          f"built no Trainer: {sum(1 for n, t in o.items() if not t.get('trainers'))}")
    for reason, count in reasons.most_common():
        example = next(n for n in none if reason in built[n])
        print(f"{count:4d}  {reason}   e.g. {example}")
    injected = [n for n, tr in built.items() if "injected" in tr and o[n]["outcome"] == "passed"]
    idle = [n for n in injected if o[n].get("graphs") == 0]
    print(f"\n== passed with an injected Trainer: {len(injected)}; of them Dynamo compiled no new graph in {len(idle)} "
          "(validate/test/predict only, no training batch, nothing compilable, or, without --reset-dynamo, a graph "
          "cached by an earlier test): e.g.")
    for nodeid in idle[:5]:
        print(f"        {nodeid}")
    return len(only)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    paths = check_inputs(args)
    args.out.mkdir(parents=True, exist_ok=True)
    plain = run_pass(args, "plain", paths)
    other = run_pass(args, "passthrough" if args.passthrough else args.backend, paths)
    # A pass-through run saved beside this one tells which failures any strategy subclass has.
    passthrough = None if args.passthrough else saved_pass(args.out / f"{pass_name('passthrough', False, paths)}.json",
                                                           paths)
    sys.exit(1 if compare(plain, other, passthrough) else 0)


if __name__ == "__main__":
    main()
