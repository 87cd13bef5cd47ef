"""The local compile cache: ``compile.cache_dir``, and torch's portable cache artifacts saved with the run."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from runner.atomic_files import atomic_write_bytes
from runner.config.cache_secret import ARTIFACTS_SUBJECT, Signer, open_artifacts, read_secret
from runner.config.paths import ARTIFACTS_DIR, ARTIFACTS_FILE
from runner.config.schema import CacheTrust
from runner.stack.settings import CacheArtifacts, StackComponent
from runner.torch_internals import settings

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
    """Write this process's compile-cache artifacts to ``path``, signed when a secret is set; None when there
    are none."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return None
    data, info = saved
    counts = _info_counts(info)
    if not any(counts.values()):
        return None
    secret, _ = read_secret()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Signer(secret).seal(ARTIFACTS_SUBJECT, data) if secret is not None else data, path)
    summary = {"torch": str(torch.__version__), "cpu": settings.cpu_capability(), "bytes": len(data),
               "signed": secret is not None, **counts}
    atomic_write_bytes(json.dumps(summary, indent=2).encode(), path.with_suffix(".json"))
    return counts


def load_artifacts(path: Path, trust: CacheTrust = CacheTrust.signed) -> dict[str, int]:
    """Load artifacts saved by :func:`save_artifacts` into this process's on-disk caches, once they verify
    (:func:`runner.config.cache_secret.open_artifacts`; ``ValueError`` with the fix when they may not be
    loaded)."""
    info_path = path.with_suffix(".json")
    summary = json.loads(info_path.read_text()) if info_path.exists() else {}
    saved_by = summary.get("torch")
    if summary.get("cpu", settings.cpu_capability()) != settings.cpu_capability():
        # torch's cache key does not cover the instruction set: such entries computed NaN (settings.machine_cache_dir).
        log.warning("compile cache: %s was saved with %s CPU kernels, this machine uses %s: not loaded",
                    path, summary["cpu"], settings.cpu_capability())
        return {}
    if saved_by != str(torch.__version__):
        log.warning("compile cache: %s was saved by torch %s, this is %s; entries will likely miss",
                    path, saved_by, torch.__version__)
    data, problem = open_artifacts(path.read_bytes(), f"reliability.load_cache_artifacts={path}",
                                   trust is CacheTrust.unsigned)
    if data is None:
        raise ValueError(problem)
    info = torch.compiler.load_cache_artifacts(data)
    return _info_counts(info) if info is not None else {}


class LocalCompileCache(StackComponent):
    """``compile.cache_dir`` and the cache artifacts of the fit (see the module docstring)."""

    name = "local_cache"

    def __init__(self, cache_dir: str | None, artifacts: CacheArtifacts,
                 trust: CacheTrust = CacheTrust.signed) -> None:
        self.cache_dir = cache_dir
        self.artifacts = artifacts
        self.trust = trust
        self.loaded: dict[str, int] = {}
        self.saved: dict[str, int] | None = None

    def configure(self) -> None:
        if self.cache_dir:  # per instruction set: torch's cache key does not cover it (settings.machine_cache_dir)
            self.torch_settings.env("TORCHINDUCTOR_CACHE_DIR", settings.machine_cache_dir(str(self.cache_dir)))
        load = self.artifacts.load_from
        if load is None:
            return
        if not load.exists():
            raise FileNotFoundError(
                f"reliability.load_cache_artifacts={load} does not exist: point it at a run dir whose "
                f"{ARTIFACTS_DIR}/{ARTIFACTS_FILE} was saved, or drop it."
            )
        self.loaded = load_artifacts(load, self.trust)
        log.info("compile cache: loaded %s from %s", self.loaded, load)

    def teardown(self) -> None:
        save, dist = self.artifacts.save_to, torch.distributed
        if save is not None and (not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0):
            try:
                self.saved = save_artifacts(save)
            except Exception:  # the artifacts are an optimisation: never lose a run over them
                log.exception("compile cache: saving artifacts failed")
        super().teardown()

    def figures(self) -> dict[str, Any]:
        return {
            "compile/cache_artifacts_loaded": dict(self.loaded) if self.artifacts.load_from else None,
            "compile/cache_artifacts_saved": str(self.artifacts.save_to) if self.saved else None,
        }
