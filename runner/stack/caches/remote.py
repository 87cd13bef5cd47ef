"""A compile cache shared by every process of a run, its ranks and a sweep's jobs (``compile.cache``)."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from runner.atomic_files import atomic_write_bytes
from runner.config.cache_secret import SECRET_ENV, Signer, read_secret, redact_url
from runner.config.decisions.stack import remote_cache_error
from runner.config.schema import CacheTrust
from runner.stack.caches.entries import SignedEntries, UnsignedEntries
from runner.stack.caches.kernels import KERNEL_NAME, open_entry, shared_object_problem, sharing_supported, sign
from runner.stack.caches.server import CONNECT_TIMEOUT_S, TIMEOUT_S, bounded_url, ping
from runner.stack.settings import StackComponent
from runner.torch_internals import caches, settings

log = logging.getLogger(__name__)

FETCH_BUDGET_S = 10.0
UPLOAD_BUDGET_S = 5.0
LOCK_WAIT_S = 0.5
_BATCH = 32


# Inductor's FX-graph cache and AOTAutograd's have a remote tier torch reads after a local miss and fills after a
# compile: every process compiling the same graph (ranks, sweep jobs, restarts, the compile process beside the run)
# finds it after the first compiled it. Dynamo still traces in each process. torch's entries are pickles it
# unpickles, so each value is signed when written and verified before it is read (caches/entries.py); one that
# fails is a counted miss. On the CPU an entry carries only the kernels' C++ source, and building it is most of a
# CPU compile, so the built kernels are shared too, one Redis hash per torch version and instruction set, signed
# (caches/kernels.py). Whatever the server does, the run goes on: one PING (a second at most), short socket
# timeouts, time budgets for fetch and upload, and after the first failure both runner's and torch's remote
# caches are off for the fit, with one warning.
class RemoteCompileCache(StackComponent):
    """Turns torch's remote compile caches on for the fit when the server answers, every entry signed (or, with
    ``trust`` unsigned, as torch stores them), and on the CPU shares the built kernels (see the module
    docstring)."""

    name = "remote_cache"

    def __init__(self, url: str, device: torch.device, trust: CacheTrust = CacheTrust.signed) -> None:
        self.url = url
        self.shown = redact_url(url)
        self.on_cpu = device.type == "cpu"
        self.trust = trust
        self.status = "not configured yet"
        self.fetched = self.uploaded = self.rejected = self.entries_rejected = 0
        self._client: Any = None
        self._secret: bytes | None = None
        self._known: set[str] = set()  # kernels the server holds (as names; their entries may be bad)
        self._bad: set[str] = set()  # names whose entry was rejected: an upload replaces them
        self._first_rejection = ""
        self._present: set[str] = set()  # kernel files in the local cache directory when the fit began
        self._before = (0, 0, 0)
        self._connected = self._active = False
        self._steps = 0

    @property
    def kernels_key(self) -> str:
        return f"runner:inductor-cpu-kernels:v2:{torch.__version__}:{settings.cpu_capability().lower()}"

    @property
    def context(self) -> str:
        """What a signature binds a kernel to besides its name: the torch that built it, the instruction set."""
        return f"torch {torch.__version__}, {settings.cpu_capability().lower()}"

    def configure(self) -> None:
        if (problem := remote_cache_error(self.url, self.trust)) is not None:
            raise ValueError(problem)  # a CompileStrategy built by hand: the same refusal as the config check
        if (why := ping(self.url)) is not None:
            self.status = f"unreachable ({why}): compiled with the local cache only"
            log.warning("compile.cache=%s: no Redis server answered (%s); compiling with the local cache only",
                        self.shown, why)
            return
        secret, _ = read_secret()  # unusable, or missing where entries are signed: refused by remote_cache_error
        signer = Signer(secret) if secret is not None else None
        codec: caches.EntryCodec
        if self.trust is CacheTrust.signed and signer is not None:
            codec, self.status = SignedEntries(signer, self._reject_entry), "in use"
        else:
            codec, self.status = UnsignedEntries(signer), "in use, unsigned (compile.cache_trust=unsigned)"
            log.info("compile.cache=%s: compile.cache_trust=unsigned: torch reads the server's entries unchecked; "
                     "whoever can write to the server can run code in this process", self.shown)
        caches.use_remote_compile_cache(self.torch_settings, bounded_url(self.url))
        caches.wrap_remote_cache_backend(self.torch_settings, lambda why: self._off(f"torch's remote cache: {why}"),
                                         codec)
        self._before = caches.remote_cache_stats()
        self._connected = self._active = True
        if not self.on_cpu:
            return  # torch's graph entries carry their Triton kernels
        if (why := sharing_supported()) is not None or secret is None:
            why = why or f"no {SECRET_ENV}: built kernels are not shared"
            self.status = f"{self.status}: compiled graphs only ({why})"
            log.warning("compile.cache=%s: compiled graphs are shared, built CPU kernels are not (%s; "
                        "docs/compile-cache.md)", self.shown, why)
            return
        import redis

        self._secret = secret
        self._client = redis.Redis.from_url(self.url, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                            socket_timeout=TIMEOUT_S)
        self._guarded("fetching kernels", self._fetch_kernels)

    def on_step_end(self, step: int) -> None:
        self._steps += 1
        if self._torch_failed():
            self._off("torch's remote cache lookup or store failed")
        elif self._steps == 1 and self._client is not None:  # the first step compiled: share it while others start
            self._guarded("uploading kernels", self._upload_kernels)

    def _torch_failed(self) -> bool:
        return self._active and caches.remote_cache_stats()[2] > self._before[2]  # an error torch raised, not Redis's

    def teardown(self) -> None:
        if self._torch_failed():
            self._off("torch's remote cache lookup or store failed")
        if self._client is not None:
            self._guarded("uploading kernels", self._upload_kernels)  # what later steps compiled
        self._close()
        super().teardown()

    def _guarded(self, what: str, action: Any) -> None:
        import redis

        try:
            action()
        except (redis.exceptions.TimeoutError, redis.exceptions.ConnectionError, OSError) as e:
            self._off(f"{what}: {type(e).__name__}: {e}")
        except redis.exceptions.RedisError as e:  # the server answered, with an error: kernels only
            log.warning("compile.cache=%s: %s failed (%s: %s); built kernels are not shared for the rest of the "
                        "fit", self.shown, what, type(e).__name__, e)
            self.status = f"in use: compiled graphs only ({what} failed: {type(e).__name__})"
            self._close()

    def _off(self, why: str) -> None:
        """Both remote caches off for the rest of the fit, with one warning."""
        if not self._active:
            return
        self._active = False
        caches.stop_remote_compile_cache(self.torch_settings)
        self._close()
        self.status = f"off after a failure ({why}): the rest of the fit compiled with the local cache"
        log.warning("compile.cache=%s: %s; the remote compile caches are off for the rest of the fit, which "
                    "compiles with the local cache", self.shown, why)

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _reject_entry(self, key: str, why: str) -> None:
        """One of torch's entries refused before torch read it (a miss: torch compiles it and stores it again)."""
        self.entries_rejected += 1
        if self.entries_rejected == 1:
            log.warning("compile.cache=%s: the server's entry %s was rejected before torch read it: %s. It is compiled "
                        "here and stored again; any more are counted in %s", self.shown, key, why,
                        "compile/remote_entries_rejected")

    def _reject(self, name: str, why: str) -> None:
        self.rejected += 1
        self._first_rejection = self._first_rejection or f"{name}: {why}"

    def _fetch_kernels(self) -> None:
        """Write the server's kernels this local cache directory lacks, each only once it verifies (atomically:
        a reader never sees half), within ``FETCH_BUDGET_S``; the rest is compiled here."""
        assert self._secret is not None
        deadline = time.monotonic() + FETCH_BUDGET_S
        cache_dir = caches.inductor_cache_dir()
        for raw in self._client.hkeys(self.kernels_key):
            name = _decode(raw)
            if name is None or not KERNEL_NAME.fullmatch(name):
                self._reject(repr(raw)[:80], "not a kernel's name")
            else:
                self._known.add(name)
        local = set(caches.cpu_kernel_files(cache_dir))
        missing = sorted(self._known - local)
        for i in range(0, len(missing), _BATCH):
            if time.monotonic() > deadline:
                log.warning("compile.cache=%s: fetching kernels took over %g s; the %d not fetched are compiled "
                            "here", self.shown, FETCH_BUDGET_S, len(missing) - i)
                break
            names = missing[i:i + _BATCH]
            for name, value in zip(names, self._client.hmget(self.kernels_key, names), strict=True):
                if value is None:
                    continue  # removed since HKEYS
                content, why = open_entry(self._secret, name, self.context, value)
                if content is None:
                    self._reject(name, str(why))
                    self._bad.add(name)
                    continue
                # Several ranks may fetch the same kernel into one directory: leave the others' temp files be.
                atomic_write_bytes(content, cache_dir / name, mode=0o755, one_writer=False)
                local.add(name)
                self.fetched += 1
        self._present = local
        if self.rejected:
            log.warning("compile.cache=%s: %d entries of the shared kernels were rejected and not written (first: "
                        "%s); they are compiled here", self.shown, self.rejected, self._first_rejection)

    def _upload_kernels(self) -> None:
        """Add what the server lacks (or holds a bad entry of) of the kernels this process compiled or loaded
        and the files built in the cache directory since the fit began (Inductor's instruction-set probes
        among them), each read under torch's lock for it and signed; pipelined, within ``UPLOAD_BUDGET_S``."""
        assert self._secret is not None
        deadline = time.monotonic() + UPLOAD_BUDGET_S
        cache_dir = caches.inductor_cache_dir()
        in_use = caches.cpu_kernels_in_use()
        pipe = self._client.pipeline(transaction=False)
        queued: list[str] = []
        for name in caches.cpu_kernel_files(cache_dir):
            if (name in self._known and name not in self._bad) or not KERNEL_NAME.fullmatch(name) \
                    or (name in self._present and caches.kernel_key(name) not in in_use):
                continue
            if time.monotonic() > deadline:
                break
            content = caches.read_kernel_locked(cache_dir, name, LOCK_WAIT_S)
            if content is None or shared_object_problem(content) is not None:
                continue  # still being built by another process, gone, or not a kernel after all
            value = sign(self._secret, name, self.context, content)
            if name in self._bad:
                pipe.hset(self.kernels_key, name, value)
            else:
                pipe.hsetnx(self.kernels_key, name, value)
            queued.append(name)
        if queued:
            results = pipe.execute()
            self.uploaded += sum(1 for name, added in zip(queued, results, strict=True) if added or name in self._bad)
            self._known.update(queued)
            self._bad.difference_update(queued)

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compile/remote_cache": self.shown, "compile/remote_cache_status": self.status}
        if self._connected:
            now = caches.remote_cache_stats()
            out.update({"compile/remote_cache_hits": now[0] - self._before[0],
                        "compile/remote_cache_misses": now[1] - self._before[1],
                        "compile/remote_entries_rejected": self.entries_rejected})
            if self.on_cpu:
                out.update({"compile/remote_kernels_fetched": self.fetched,
                            "compile/remote_kernels_uploaded": self.uploaded,
                            "compile/remote_kernels_rejected": self.rejected})
        return out


def _decode(raw: bytes) -> str | None:
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return None


class NoRemoteCache(StackComponent):
    """No ``compile.cache``: nothing shared."""


def build_remote_cache(url: str | None, device: torch.device,
                       trust: CacheTrust = CacheTrust.signed) -> RemoteCompileCache | NoRemoteCache:
    """The shared compile cache for ``compile.cache``; a no-op component without one."""
    return RemoteCompileCache(url, device, trust) if url else NoRemoteCache()
