"""Compile caches that outlive the run: a warm on-disk cache, and portable cache artifacts.

Two mechanisms, both torch's own:

* ``compile.cache_dir``: Inductor's and AOTAutograd's on-disk caches (``TORCHINDUCTOR_CACHE_DIR``,
  set by the compile stack). A second run with the same directory hits the FX-graph and AOTAutograd
  caches instead of recompiling (Dynamo still traces; that part is not cached).
* cache artifacts: ``torch.compiler.save_cache_artifacts()`` serialises every cache entry this
  process created or used; ``load_cache_artifacts(bytes)`` writes them into another process's
  on-disk caches. ``CompileCacheArtifacts`` saves them with the run
  (``<run_dir>/compile_cache/artifacts.bin`` + ``artifacts.json``) when training ends or stops, and
  loads ``reliability.load_cache_artifacts`` (a file, or a run dir holding one) after the compile
  stack has set the cache directory and before anything is compiled (``on_fit_start``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from runner import torch_internals as ti
from runner.config.paths import ARTIFACTS_DIR, ARTIFACTS_FILE, artifacts_path, resolve_artifacts_path
from runner.reliability.checkpoint_io import atomic_write_bytes

log = logging.getLogger(__name__)

def _info_counts(info: Any) -> dict[str, int]:
    """``CacheInfo`` -> {artifact kind: entries} (its fields are lists of keys, per cache)."""
    out: dict[str, int] = {}
    for name in ("inductor_artifacts", "autotune_artifacts", "aot_autograd_artifacts", "pgo_artifacts",
                 "precompile_artifacts"):
        value = getattr(info, name, None)
        if value is not None:
            out[name] = len(value)
    return out


def save_artifacts(path: Path) -> dict[str, int] | None:
    """Write this process's compile-cache artifacts to ``path``; None when there are none."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return None
    data, info = saved
    counts = _info_counts(info)
    if not any(counts.values()):
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    # Through the same atomic writer as checkpoints: a kill never leaves half a file.
    atomic_write_bytes(data, path)
    summary = {"torch": str(torch.__version__), "cpu": ti.cpu_capability(), "bytes": len(data), **counts}
    atomic_write_bytes(json.dumps(summary, indent=2).encode(), path.with_suffix(".json"))
    return counts


def load_artifacts(path: Path) -> dict[str, int]:
    """Load artifacts saved by :func:`save_artifacts` into this process's on-disk caches."""
    info_path = path.with_suffix(".json")
    summary = json.loads(info_path.read_text()) if info_path.exists() else {}
    saved_by = summary.get("torch")
    if summary.get("cpu", ti.cpu_capability()) != ti.cpu_capability():
        # torch's cache key does not cover the instruction set: such entries computed NaN (ti.machine_cache_dir).
        log.warning("compile cache: %s was saved with %s CPU kernels, this machine uses %s: not loaded",
                    path, summary["cpu"], ti.cpu_capability())
        return {}
    if saved_by != str(torch.__version__):
        log.warning("compile cache: %s was saved by torch %s, this is %s; entries will likely miss",
                    path, saved_by, torch.__version__)
    info = torch.compiler.load_cache_artifacts(path.read_bytes())
    return _info_counts(info) if info is not None else {}


class CompileCacheArtifacts(Callback):
    """Loads another run's artifacts at fit start; saves this run's at the end (see module docstring)."""

    def __init__(self, run_dir: Path, save: bool = True, load: str | None = None) -> None:
        self.path = artifacts_path(run_dir)
        self.save = save
        self.load = resolve_artifacts_path(load) if load else None
        self.loaded: dict[str, int] = {}
        self.saved: dict[str, int] | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.load is None:
            return
        if not self.load.exists():
            raise FileNotFoundError(
                f"reliability.load_cache_artifacts={self.load} does not exist: point it at a run dir whose "
                f"{ARTIFACTS_DIR}/{ARTIFACTS_FILE} was saved, or drop it."
            )
        self.loaded = load_artifacts(self.load)
        log.info("compile cache: loaded %s from %s", self.loaded, self.load)

    def _save(self, trainer: L.Trainer) -> None:
        if self.save and trainer.is_global_zero:
            try:
                self.saved = save_artifacts(self.path)
            except Exception:  # the artifacts are an optimisation: never lose a run over them
                log.exception("compile cache: saving artifacts failed")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._save(trainer)

    def figures(self) -> dict[str, Any]:
        return {
            "compile/cache_artifacts_loaded": dict(self.loaded) if self.load else None,
            "compile/cache_artifacts_saved": str(self.path) if self.saved else None,
        }
