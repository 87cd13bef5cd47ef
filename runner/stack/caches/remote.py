"""A compile cache shared by every process of a run, its ranks and a sweep's jobs (``compile.cache``).

Inductor's FX-graph cache and AOTAutograd's cache each have a remote tier that torch reads after a local
miss and fills after a compile: with ``compile.cache=redis://HOST:PORT`` every process that compiles the
same graph (every rank, every sweep job, a restart, the compile process beside the run, which builds its
stack from the same settings) finds it there after the first has compiled it, whatever its local cache
directory holds. Dynamo still traces in each process; the graphs' compiles are what the cache skips.

On a GPU a remote FX-graph entry carries its compiled Triton kernels (torch bundles them,
``bundle_triton_into_fx_graph_cache``). On the CPU it carries the kernels' C++ source only, and building
them is most of a CPU compile (measured: a remote hit alone took the quickstart GPT's compile from 23 s
to 18 s; with the kernels, to 2 s). So on the CPU runner also shares the built kernels through the same
server: one Redis hash per torch version and CPU instruction set (a kernel built for AVX-512 must never
load on an AVX2 machine), fetched into the local cache directory before anything compiles and filled with
what this process built after its first step and at the end of the fit. A kernel's file name is the hash
of its source and build command, so a fetched kernel is only ever loaded for the source it was built from.

A server that is down or unreachable is one warning and a local compile, never a crashed run: the
address is tried once (a ``PING``, one second at most) before anything compiles, and the remote caches
are turned on only if it answers; a later error is a warning too.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from runner import torch_internals as ti
from runner.config.checks_stack import remote_cache_error
from runner.stack.component import StackComponent

log = logging.getLogger(__name__)

_KERNEL_NAME = re.compile(r"^[0-9a-z]{2}/[0-9a-z]+(\.main)?\.so$")  # nothing else is written from the server
_BATCH = 32


def ping(url: str, timeout_s: float = 1.0) -> str | None:
    """None when the Redis server at ``url`` answers a PING within ``timeout_s``, else why not."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.exceptions.RedisError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    return None


class RemoteCompileCache(StackComponent):
    """Turns torch's remote compile caches on for the fit when the server answers, and on the CPU shares
    the built kernels (see the module docstring)."""

    name = "remote_cache"

    def __init__(self, url: str, device: torch.device) -> None:
        self.url = url
        self.share_kernels = device.type == "cpu"
        self.status = "not configured yet"
        self.fetched = 0
        self.uploaded = 0
        self._client: Any = None
        self._known: set[str] = set()  # kernels the server holds
        self._before = (0, 0)
        self._steps = 0

    @property
    def kernels_key(self) -> str:
        return f"runner:inductor-cpu-kernels:{torch.__version__}:{ti.cpu_capability().lower()}"

    def configure(self) -> None:
        if (problem := remote_cache_error(self.url)) is not None:
            raise ValueError(problem)  # a CompileStrategy built by hand: the same refusal as the config check
        if (why := ping(self.url)) is not None:
            self.status = f"unreachable ({why}): compiled with the local cache only"
            log.warning("compile.cache=%s: no Redis server answered (%s); compiling with the local cache only",
                        self.url, why)
            return
        ti.use_remote_compile_cache(self.torch_settings, self.url)
        self._before = ti.remote_cache_stats()
        self.status = "in use"
        if self.share_kernels:
            import redis

            self._client = redis.Redis.from_url(self.url, socket_timeout=30)
            self._guarded(self._fetch_kernels)

    def on_step_end(self, step: int) -> None:
        self._steps += 1
        if self._steps == 1 and self._client is not None:  # the first step compiled: share it while others start
            self._guarded(self._upload_kernels)

    def teardown(self) -> None:
        if self._client is not None:
            self._guarded(self._upload_kernels)  # what later steps compiled (recompiles, validation)
            self._client.close()
            self._client = None
        super().teardown()

    def _guarded(self, action: Any) -> None:
        import redis

        try:
            action()
        except (redis.exceptions.RedisError, OSError) as e:
            log.warning("compile.cache=%s: sharing compiled kernels failed (%s: %s); compiling locally", self.url,
                        type(e).__name__, e)
            self._client = None

    def _fetch_kernels(self) -> None:
        """Write the server's kernels this local cache directory lacks (atomically: a reader never sees half)."""
        cache_dir = ti.inductor_cache_dir()
        self._known = {name.decode() for name in self._client.hkeys(self.kernels_key)}
        missing = sorted(n for n in self._known - set(ti.cpu_kernel_files(cache_dir)) if _KERNEL_NAME.match(n))
        for i in range(0, len(missing), _BATCH):
            names = missing[i:i + _BATCH]
            for name, data in zip(names, self._client.hmget(self.kernels_key, names), strict=True):
                if data:
                    _write_atomically(cache_dir / name, data)
                    self.fetched += 1

    def _upload_kernels(self) -> None:
        for name, path in ti.cpu_kernel_files(ti.inductor_cache_dir()).items():
            if name not in self._known and _KERNEL_NAME.match(name):
                self.uploaded += int(self._client.hsetnx(self.kernels_key, name, path.read_bytes()))
                self._known.add(name)

    def figures(self) -> dict[str, Any]:
        hits, misses = (now - before for now, before in zip(ti.remote_cache_stats(), self._before, strict=True))
        out: dict[str, Any] = {"compile/remote_cache": self.url, "compile/remote_cache_status": self.status}
        if self.status == "in use":
            out.update({"compile/remote_cache_hits": hits, "compile/remote_cache_misses": misses})
            if self.share_kernels:
                out.update({"compile/remote_kernels_fetched": self.fetched,
                            "compile/remote_kernels_uploaded": self.uploaded})
        return out


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fetch-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


def build_remote_cache(url: str | None, device: torch.device) -> StackComponent:
    """The shared compile cache for ``compile.cache``; a no-op component without one."""
    return RemoteCompileCache(url, device) if url else StackComponent()
