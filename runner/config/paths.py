"""Where a run keeps its files: one definition each, used by the checks, the builders and the run."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parents[1]
# Where the data files runner ships are in a checkout (examples/data), as recipes and docs name them.
SHIPPED = "examples/data"
# Those files: runner/_data in an installed wheel (see setup.py), examples/data in a checkout.
SHIPPED_DATA = _PKG / "_data" if (_PKG / "_data").is_dir() else _PKG.parent / SHIPPED
ARTIFACTS_DIR = "compile_cache"
ARTIFACTS_FILE = "artifacts.bin"


def checkpoint_dir(run_dir: str | Path) -> Path:
    """The run's checkpoint directory."""
    return Path(run_dir) / "checkpoints"


def last_checkpoint_path(run_dir: str | Path) -> Path:
    """Where ``ModelCheckpoint(save_last=True)`` keeps ``last.ckpt``; ``ckpt_path=last`` finds it there."""
    return checkpoint_dir(run_dir) / "last.ckpt"


def artifacts_path(run_dir: str | Path) -> Path:
    """Where a run saves its compile-cache artifacts."""
    return Path(run_dir) / ARTIFACTS_DIR / ARTIFACTS_FILE


def resolve_artifacts_path(path: str | Path) -> Path:
    """A file as is; a directory -> its ``compile_cache/artifacts.bin`` (or ``artifacts.bin``)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        return p
    saved = artifacts_path(p)  # as a run saves them
    return next((c for c in (saved, p / ARTIFACTS_FILE) if c.exists()), saved)


def shipped(path: str | None) -> str | None:
    """``path`` as given, unless it names a data file runner ships (``examples/data/NAME``) that the current directory
    lacks: then runner's own copy, so a recipe on shipped data runs from any directory."""
    if path is None or Path(path).is_absolute() or Path(path).expanduser().exists():
        return path
    name = Path(path).as_posix().removeprefix("./")
    if not name.startswith(SHIPPED + "/"):
        return path
    found = SHIPPED_DATA / name.removeprefix(SHIPPED + "/")
    return str(found) if found.exists() else path
