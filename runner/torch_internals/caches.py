"""Inductor's compile caches as ``compile.cache`` uses them: the remote (Redis) FX-graph and AOTAutograd tiers
through runner's codec, their counts, the local cache directory and the C++ kernels built in it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from runner.torch_internals.settings import TorchSettings

REDIS_URL_ENV = "TORCHINDUCTOR_REDIS_URL"  # read when each cache first creates its client (the query: its timeouts)
_REMOTE_CACHES = ("RemoteFxGraphCache", "RemoteAOTAutogradCache")


def use_remote_compile_cache(settings: TorchSettings, url: str) -> None:
    """Inductor's FX-graph and AOTAutograd caches also read and fill the Redis server at ``url``."""
    # The autotune cache stays off: its lookups run in compile workers, which the codec wrapper does not reach.
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache

    settings.env(REDIS_URL_ENV, url)
    settings.inductor("fx_graph_remote_cache", True)
    settings.inductor("autotune_remote_cache", False)
    settings.functorch("enable_remote_autograd_cache", True)
    # AOTAutograd keeps one client per process (functools.cache): a fit of its own starts with a new one, for
    # this fit's address, and not the one an earlier fit's failure marked unavailable.
    AOTAutogradCache.get_remote_cache.cache_clear()


class EntryCodec(Protocol):
    """``seal`` before a write to the server, ``open`` after a read (None: a miss)."""

    def seal(self, key: str, data: bytes) -> bytes: ...

    def open(self, key: str, stored: bytes) -> bytes | None: ...


def wrap_remote_cache_backend(settings: TorchSettings, on_failure: Callable[[str], None], codec: EntryCodec) -> None:
    """Every value torch's Redis client writes or reads passes ``codec``; a Redis error marks the client unavailable
    and goes to ``on_failure`` instead of into the compile (a timed-out write crashed the backward, torch 2.13)."""
    import redis
    from torch._inductor.remote_cache import RedisRemoteCacheBackend as Backend

    get, put = Backend._get, Backend._put

    def failed(backend: Any, e: Exception) -> None:
        backend._redis = None
        on_failure(f"{type(e).__name__}: {e}")

    def _get(self: Any, key: str) -> bytes | None:
        try:
            stored = get(self, key)
        except redis.exceptions.RedisError as e:
            failed(self, e)
            return None
        return None if stored is None else codec.open(key, stored)

    def _put(self: Any, key: str, data: bytes) -> None:
        try:
            put(self, key, codec.seal(key, data))
        except redis.exceptions.RedisError as e:
            failed(self, e)

    settings.patch(Backend, "_get", _get)
    settings.patch(Backend, "_put", _put)


def stop_remote_compile_cache(settings: TorchSettings) -> None:
    """torch's remote caches off for the compiles still to come (both flags are read at each compile)."""
    settings.inductor("fx_graph_remote_cache", False)
    settings.functorch("enable_remote_autograd_cache", False)


def remote_cache_stats() -> tuple[int, int, int]:
    """(hits, misses, failures) of the remote FX-graph and AOTAutograd caches in this process so far."""
    from torch._inductor.remote_cache import cache_stats

    stats = [cache_stats._stats[name] for name in _REMOTE_CACHES if name in cache_stats._stats]
    return sum(s.hit for s in stats), sum(s.miss for s in stats), sum(s.exception for s in stats)


def inductor_cache_dir() -> Path:
    """The directory Inductor's on-disk caches use now (``TORCHINDUCTOR_CACHE_DIR`` or torch's default)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir())


def cpu_kernel_files(cache_dir: Path) -> dict[str, Path]:
    """Inductor's compiled C++ kernels under ``cache_dir`` (``<2 chars>/<hash>.so``, ``<hash>.main.so``), by path."""
    return {f"{p.parent.name}/{p.name}": p for p in sorted(cache_dir.glob("??/*.so"))}


def kernel_key(name: str) -> str:
    """The hash a kernel file is named by (``ab/cabc.main.so`` -> ``cabc``): its ``CppCodeCache`` key and lock."""
    stem = name.rsplit("/", 1)[-1]
    return stem.removesuffix(".so").removesuffix(".main")


def cpu_kernels_in_use() -> set[str]:
    """Keys of the C++ kernels this process compiled or loaded (until Inductor's in-process caches are cleared)."""
    from torch._inductor import codecache

    classes, seen = [codecache.CppCodeCache], set()
    while classes:
        cls = classes.pop()
        seen.add(cls)
        classes += [sub for sub in cls.__subclasses__() if sub not in seen]
    return {key for cls in seen for key in list(vars(cls).get("cache", {}))}


def read_kernel_locked(cache_dir: Path, name: str, timeout_s: float) -> bytes | None:
    """Kernel file ``name``, read under torch's build lock (never half written); None past ``timeout_s`` or gone."""
    from filelock import Timeout  # torch's FileLock is the filelock package's, with wait counters
    from torch._inductor.codecache import get_lock_dir
    from torch.utils._filelock import FileLock

    lock = FileLock(str(Path(get_lock_dir()) / f"{kernel_key(name)}.lock"), timeout=timeout_s)
    try:
        with lock:
            return (cache_dir / name).read_bytes()
    except (Timeout, FileNotFoundError):
        return None
