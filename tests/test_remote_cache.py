"""``compile.cache``: a real Redis server shared by processes that compile the same step, and what the cache
does when the server, or someone who can write to it, misbehaves.

The server is Debian's ``redis-server`` (``.ci/run`` installs it), started here on a free localhost port
and stopped after the tests. A first process compiles cold and fills it; a second, with an empty local
cache directory, finds the same graphs and kernels there. Then the server's entries are replaced (a
hostile shared object signed with another secret, a truncated kernel, names that are not kernels'), the
server stops answering after ``PING`` (a link that stalls) or stops taking writes (``CLIENT PAUSE WRITE``),
and the kernels are uploaded while another process holds the lock of one being rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.config.cache_secret import SECRET_ENV, Signer, redact_url
from runner.stack.caches.entries import SignedEntries
from runner.stack.caches.kernels import KERNEL_NAME, MAX_KERNEL_BYTES, open_entry, shared_object_problem, sign
from tests.helpers import free_port, redis_server

ROOT = Path(__file__).resolve().parents[1]
SECRET = "a-test-secret-of-the-cluster-0123456789"
CONTEXT_SCRIPT = ("import torch; from runner.torch_internals import settings; "
                  "print(torch.__version__, settings.cpu_capability())")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis server of this module's own, on a free localhost port, with nothing persisted."""
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _client(url: str):  # type: ignore[no-untyped-def]
    import redis

    return redis.Redis.from_url(url)


# One process of a cluster: a tiny MLP's step through CompileStrategy with Inductor, compiled in the run,
# with a local cache directory of its own; prints the stack's figures and the kernel hash it used.
FIT = """
import json, sys
import lightning as L, torch
from torch import nn
import runner

class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

class Loaded(L.Callback):  # the kernels the compiled step loaded, as the first step ends
    names = []
    def on_train_batch_end(self, *args):
        from runner.torch_internals import caches
        Loaded.names = Loaded.names or sorted(n for n in caches.cpu_kernel_files(caches.inductor_cache_dir())
                                              if caches.kernel_key(n) in caches.cpu_kernels_in_use())

torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
cfg = runner.CompileConfig(cache=sys.argv[1], cache_dir=sys.argv[2], background=runner.Background.disabled)
strategy = runner.CompileStrategy(compile=cfg, device="cpu", console=False)
trainer = L.Trainer(strategy=strategy, max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[Loaded()])
trainer.fit(M(), torch.utils.data.DataLoader(data, batch_size=16))
figures = {k: v for k, v in strategy.figures().items() if "remote" in k}
figures["steps"] = trainer.global_step
figures["key"] = strategy.stack.parts.remote_cache.kernels_key
figures["context"] = strategy.stack.parts.remote_cache.context
figures["loaded"] = Loaded.names
print("FIGURES " + json.dumps(figures))
"""


def _fit(url: str, cache_dir: Path, secret: str | None = SECRET, **env: str) -> tuple[dict, str, float]:
    environ = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    environ.update({"PYTHONPATH": str(ROOT), **({SECRET_ENV: secret} if secret else {}), **env})
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", FIT, url, str(cache_dir)], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=600)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("FIGURES "))
    return json.loads(line.removeprefix("FIGURES ")), proc.stderr, took


@pytest.fixture(scope="module")
def first(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The first process: compiles cold into an empty server and shares what it built."""
    figures, _, took = _fit(redis_url, tmp_path_factory.mktemp("first"))
    figures["took_s"] = took  # a cold compile's whole process, the stalled link's yardstick
    return figures


@pytest.mark.slow
def test_a_second_process_with_an_empty_local_cache_compiles_from_the_shared_one(redis_url: str, first: dict,
                                                                                 tmp_path: Path) -> None:
    assert first["compile/remote_cache_status"] == "in use" and first["steps"] == 2
    assert first["compile/remote_cache_hits"] == 0 and first["compile/remote_cache_misses"] > 0
    # The first built its C++ kernels and shared them (on the CPU the remote graph entries hold source only).
    assert first["compile/remote_kernels_uploaded"] > 0 and first["compile/remote_kernels_fetched"] == 0
    # Every entry on the server is a signed, complete shared object of this machine.
    entries = _client(redis_url).hgetall(first["key"])
    assert len(entries) == first["compile/remote_kernels_uploaded"]
    for name, value in entries.items():
        assert KERNEL_NAME.fullmatch(name.decode())
        assert open_entry(SECRET.encode(), name.decode(), first["context"], value)[1] is None
    # Every entry torch stored is in an envelope that verifies under the cluster's secret, bound to its key.
    graphs = {k.decode(): v for k in _client(redis_url).keys("pt2:*") if (v := _client(redis_url).get(k))}
    assert len(graphs) == first["compile/remote_cache_misses"]
    opener = SignedEntries(Signer(SECRET.encode()), lambda key, why: pytest.fail(f"{key}: {why}"))
    assert all(json.loads(opener.open(key, value) or b"null")["data"] for key, value in graphs.items())
    second, _, _ = _fit(redis_url, tmp_path / "second")  # another local cache directory: empty
    assert second["compile/remote_cache_misses"] == 0
    assert second["compile/remote_cache_hits"] == first["compile/remote_cache_misses"]
    # Every kernel came from the server and none was built here: nothing new to upload.
    assert second["compile/remote_kernels_fetched"] == first["compile/remote_kernels_uploaded"]
    assert second["compile/remote_kernels_uploaded"] == 0 and second["compile/remote_kernels_rejected"] == 0
    built = {p.name for p in (tmp_path / "second").rglob("*.so")}
    assert len(built) == second["compile/remote_kernels_fetched"]


HOSTILE_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void ran(void) {
    const char *path = getenv("RUNNER_TEST_MARKER");
    if (path) { FILE *f = fopen(path, "w"); if (f) { fputs("ran", f); fclose(f); } }
}
"""


def _hostile_object(tmp_path: Path) -> bytes:
    """A shared object whose constructor writes a marker file: the code a writer to the server would plant."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc (Inductor's CPU compiler) is not installed")
    (tmp_path / "hostile.c").write_text(HOSTILE_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "hostile.so"), str(tmp_path / "hostile.c")],
                   check=True)
    return (tmp_path / "hostile.so").read_bytes()


@pytest.mark.slow
def test_hostile_truncated_and_misnamed_entries_are_never_written_and_the_fit_ends_well(
        redis_url: str, first: dict, tmp_path: Path) -> None:
    client = _client(redis_url)
    key, context = first["key"], first["context"]
    good = {name.decode(): value for name, value in client.hgetall(key).items()}
    hostile_name, truncated_name = first["loaded"][:2]  # kernels every process of this fit loads
    hostile = _hostile_object(tmp_path)
    assert shared_object_problem(hostile) is None  # a real shared object of this machine: only the signature tells
    client.hset(key, hostile_name, sign(b"an attacker's own secret, not ours", hostile_name, context, hostile))
    client.hset(key, truncated_name, good[truncated_name][: len(good[truncated_name]) // 2])
    client.hset(key, b"\xff\xfe/not-utf8.so", b"junk")
    client.hset(key, f"{hostile_name}\n", sign(SECRET.encode(), f"{hostile_name}\n", context, hostile))
    marker = tmp_path / "marker"
    figures, stderr, _ = _fit(redis_url, tmp_path / "cache", RUNNER_TEST_MARKER=str(marker))
    assert figures["steps"] == 2 and not marker.exists()  # the hostile object never loaded
    assert figures["compile/remote_kernels_rejected"] == 4
    assert figures["compile/remote_kernels_fetched"] == len(good) - 2
    assert stderr.count("entries of the shared kernels were rejected") == 1  # one warning
    for name in (hostile_name, truncated_name):  # compiled here instead, and the bad entries replaced
        [path] = (tmp_path / "cache").rglob(name)  # under the machine's directory (cpu-<instruction set>/)
        local = path.read_bytes()
        assert local != hostile and shared_object_problem(local) is None
        assert open_entry(SECRET.encode(), name, context, client.hget(key, name))[1] is None
    assert figures["compile/remote_kernels_uploaded"] == 2
    client.hdel(key, b"\xff\xfe/not-utf8.so", f"{hostile_name}\n")


class StallAfterPing:
    """A TCP link to the real server that forwards one connection's ``PING`` and its answer, then forwards
    nothing more on any connection: a server (or network) that hangs after answering."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.stalled = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(conn, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, conn, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if self.stalled.is_set():
                continue  # swallowed: the other side waits for ever
            dst.sendall(data)
            if not from_client and data.startswith(b"+PONG"):
                self.stalled.set()


@pytest.mark.slow
def test_a_server_that_hangs_after_answering_ping_costs_one_timeout(redis_url: str, first: dict,
                                                                   tmp_path: Path) -> None:
    from runner.stack.caches.remote import TIMEOUT_S

    link = StallAfterPing(int(redis_url.rsplit(":", 1)[1]))
    # The first process compiled the same fit cold (and uploaded what it built), as the stalled one must compile
    # everything locally: the difference is what the stall cost. (A server that refuses at once: the in-process
    # tests below.)
    local_s = first["took_s"]
    figures, stderr, took = _fit(f"redis://127.0.0.1:{link.port}", tmp_path / "stalled")
    assert figures["steps"] == 2
    assert figures["compile/remote_cache_status"].startswith("off after a failure (fetching kernels: TimeoutError")
    assert stderr.count("the remote compile caches are off for the rest of the fit") == 1
    # torch's caches went off with runner's before anything compiled: no lookup waited on the link.
    assert figures["compile/remote_cache_hits"] == figures["compile/remote_cache_misses"] == 0
    assert took < local_s + 5 * TIMEOUT_S + 5, (took, local_s)  # one timeout, and the machine's noise


@pytest.mark.slow
def test_a_server_that_stops_taking_writes_turns_both_caches_off_after_the_first_step(
        redis_url: str, tmp_path: Path) -> None:
    client = _client(redis_url)
    client.execute_command("CLIENT", "PAUSE", "120000", "WRITE")  # reads answer, writes wait
    try:
        # Database 3 of the server holds nothing: every graph misses, compiles, and is stored (or tried to be).
        figures, stderr, _ = _fit(f"{redis_url}/3", tmp_path / "cache")
    finally:
        client.execute_command("CLIENT", "UNPAUSE")
    assert figures["steps"] == 2
    assert figures["compile/remote_cache_status"].startswith("off after a failure (torch's remote cache: TimeoutError")
    assert stderr.count("the remote compile caches are off for the rest of the fit") == 1
    assert figures["compile/remote_kernels_uploaded"] == 0


UPLOAD = """
import json, subprocess, sys, torch
from runner.torch_internals import caches
from runner.stack.caches import RemoteCompileCache

url, lock_holder = sys.argv[1], sys.argv[2]
f = torch.compile(lambda x: (x.sin() * 2).cumsum(0), backend="inductor")
f(torch.randn(64))  # builds kernels in this process (the cache directory is the test's)
cache_dir = caches.inductor_cache_dir()
kernels = [n for n in caches.cpu_kernel_files(cache_dir) if caches.kernel_key(n) in caches.cpu_kernels_in_use()]
name = kernels[0]
whole = (cache_dir / name).read_bytes()
(cache_dir / name).unlink()  # being rebuilt (a new file: the loaded one stays mapped): a third written so far
(cache_dir / name).write_bytes(whole[: len(whole) // 3])
holder = subprocess.Popen([sys.executable, "-c", lock_holder, caches.kernel_key(name)], stdout=subprocess.PIPE)
holder.stdout.readline()  # it holds the lock
cache = RemoteCompileCache(url, torch.device("cpu"))
cache.configure()
cache.on_step_end(1)  # the upload after the first step, racing the rebuild
print("RESULT " + json.dumps({"name": name, "kernels": kernels, "uploaded": cache.uploaded, "key": cache.kernels_key,
                             "status": cache.status}))
holder.kill()
cache.teardown()
"""
LOCK_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from filelock import FileLock
    from torch._inductor.codecache import get_lock_dir
    lock = FileLock(str(Path(get_lock_dir()) / (sys.argv[1] + ".lock")))
    lock.acquire()
    print("held", flush=True)
    time.sleep(600)
""")


@pytest.mark.slow
def test_an_upload_racing_a_build_never_publishes_a_partial_kernel(redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), SECRET_ENV: SECRET, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", UPLOAD, redis_url, LOCK_HOLDER], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")).removeprefix("RESULT "))
    held = _client(redis_url).hget(result["key"], result["name"])
    assert held is None or shared_object_problem(held[32:]) is None  # never the third of a file
    assert result["uploaded"] == len(result["kernels"]) - 1  # every other kernel it used went up


@pytest.mark.slow
def test_unsigned_sharing_without_a_secret_shares_graphs_unchecked_and_no_kernels(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from runner.config.schema import CacheTrust
    from runner.stack.caches import RemoteCompileCache

    monkeypatch.delenv(SECRET_ENV, raising=False)
    with pytest.raises(ValueError, match="no secret to sign"):  # built by hand: refused as the config check does
        RemoteCompileCache(f"{redis_url}/4", torch.device("cpu")).configure()
    cache = RemoteCompileCache(f"{redis_url}/4", torch.device("cpu"), CacheTrust.unsigned)  # a database of its own
    cache.configure()
    try:
        assert cache.status == "in use, unsigned (compile.cache_trust=unsigned): compiled graphs only (no " \
                               "RUNNER_COMPILE_CACHE_SECRET: built kernels are not shared)"
        assert cache.figures()["compile/remote_cache_status"] == cache.status  # the summary's shared-cache row
        assert torch._inductor.config.fx_graph_remote_cache is True
        assert not _client(f"{redis_url}/4").exists(cache.kernels_key)
    finally:
        cache.teardown()
    assert torch._inductor.config.fx_graph_remote_cache is not True


def test_signed_entries_verify_only_whole_with_the_same_secret_name_and_machine() -> None:
    content = _any_shared_object()
    value = sign(b"s" * 32, "ab/cdef.so", "torch 2.13.0, avx2", content)
    assert open_entry(b"s" * 32, "ab/cdef.so", "torch 2.13.0, avx2", value) == (content, None)
    for secret, name, context, changed in ((b"t" * 32, "ab/cdef.so", "torch 2.13.0, avx2", value),
                                           (b"s" * 32, "ab/cdeg.so", "torch 2.13.0, avx2", value),
                                           (b"s" * 32, "ab/cdef.so", "torch 2.13.0, avx512", value),
                                           (b"s" * 32, "ab/cdef.so", "torch 2.13.0, avx2", value[:-1])):
        assert open_entry(secret, name, context, changed)[0] is None
    not_elf = sign(b"s" * 32, "ab/cdef.so", "c", b"#!/bin/sh\n" * 10)
    assert open_entry(b"s" * 32, "ab/cdef.so", "c", not_elf) == (None, "not an ELF file")
    assert "over the" in str(open_entry(b"s" * 32, "n", "c", b"x" * (MAX_KERNEL_BYTES + 64))[1])
    assert not KERNEL_NAME.fullmatch("ab/cdef.so\n") and not KERNEL_NAME.fullmatch("../ab/cdef.so")


def _any_shared_object() -> bytes:
    import torch

    lib = next(Path(torch.__file__).parent.joinpath("lib").glob("libc10.so*"))
    return lib.read_bytes()


def test_a_password_never_reaches_logs_or_reports(caplog: pytest.LogCaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from runner.stack.caches import RemoteCompileCache
    from runner.stack.caches.remote import bounded_url

    monkeypatch.setenv(SECRET_ENV, SECRET)
    url = f"redis://runner:hunter2-secret@127.0.0.1:{free_port()}/2"  # nothing listens there
    assert redact_url(url) == f"redis://runner:***@127.0.0.1:{url.rsplit(':', 1)[1]}"
    cache = RemoteCompileCache(url, torch.device("cpu"))
    cache.configure()
    assert cache.status.startswith("unreachable") and "hunter2" not in json.dumps(cache.figures())
    assert "runner:***@" in caplog.text and "hunter2" not in caplog.text
    assert "socket_timeout=2" in bounded_url(url) and "socket_connect_timeout=1" in bounded_url(url)
    assert "socket_timeout=9" in bounded_url(url + "?socket_timeout=9")  # the user's own setting stays


def test_an_unusable_secret_is_refused_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.config import ConfigError
    from runner.config.composing.loading import compose, load

    overrides = ["+recipe=smoke", "compile.cache=redis://127.0.0.1:6379"]
    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(ConfigError, match=r"RUNNER_COMPILE_CACHE_SECRET holds 5 bytes.*at least 16"):
        load(compose(overrides, run_dir=str(tmp_path)))
    monkeypatch.delenv(SECRET_ENV)
    monkeypatch.setenv("RUNNER_COMPILE_CACHE_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"RUNNER_COMPILE_CACHE_SECRET_FILE=.*missing cannot be read"):
        load(compose(overrides, run_dir=str(tmp_path)))
    (tmp_path / "secret").write_text("x" * 40 + "\n")
    monkeypatch.setenv("RUNNER_COMPILE_CACHE_SECRET_FILE", str(tmp_path / "secret"))
    assert load(compose(overrides, run_dir=str(tmp_path))).compile.cache == "redis://127.0.0.1:6379"


def test_a_server_that_is_not_there_is_a_warning_and_a_local_compile(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning as L
    import torch

    import runner
    from tests.helpers import tiny_data, tiny_module

    monkeypatch.setenv(SECRET_ENV, SECRET)
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    cfg = runner.CompileConfig(backend="eager", cache=url, background=runner.Background.disabled)
    strategy = runner.CompileStrategy(compile=cfg, device="cpu", console=False)
    trainer = L.Trainer(strategy=strategy, max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(tiny_module(), tiny_data())
    figures = strategy.figures()
    assert trainer.global_step == 2 and figures["compile/frames"] == 1
    assert str(figures["compile/remote_cache_status"]).startswith("unreachable (ConnectionError")
    assert "compile/remote_cache_hits" not in figures
    assert torch._inductor.config.fx_graph_remote_cache is not True  # nothing turned on, nothing left on


def test_a_malformed_address_is_refused_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.config import ConfigError
    from runner.config.composing.loading import compose, load

    monkeypatch.setenv(SECRET_ENV, SECRET)
    with pytest.raises(ConfigError, match=r"compile.cache=http://cache:6379 is not a Redis address.*redis://HOST:PORT"):
        load(compose(["+recipe=smoke", "compile.cache=http://cache:6379"], run_dir=str(tmp_path)))
    cfg = load(compose(["+recipe=smoke", "compile.cache=redis://127.0.0.1:6379"], run_dir=str(tmp_path)))
    assert cfg.compile.cache == "redis://127.0.0.1:6379"  # the suggested form composes
