"""Where a run keeps its files: one definition each, used by the checks, the builders and the run."""

from __future__ import annotations

from pathlib import Path

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
    if p.is_dir():
        for candidate in (p / ARTIFACTS_DIR / ARTIFACTS_FILE, p / ARTIFACTS_FILE):
            if candidate.exists():
                return candidate
        return p / ARTIFACTS_DIR / ARTIFACTS_FILE
    return p
