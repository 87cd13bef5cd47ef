"""torch's own entries on the shared compile cache are signed: what someone who can write to the server tries,
and what comes of it (docs/compile-cache.md, the trust model); and the cache artifacts a run saves and another
loads, signed the same way.

One real ``redis-server`` for the module. A first fit (a tiny MLP's step, Inductor, in this process) fills it:
torch stores the step's forward and backward FX graphs (``pt2:fx-graph-v1::...``) and its AOTAutograd entry
(``pt2:autograd-experimental::...``), each sealed under the cluster's secret, and the fit's cache artifacts are
saved signed and unsigned. Each case then replaces those three entries as a writer to the server would and fits
again with an empty local cache directory. The attacks:

* ``bare``: a pickle that writes a marker file when unpickled, stored as torch stores an entry;
* ``kept_signature``: that pickle inside a well-formed envelope that keeps the real value's signature;
* ``moved``: a validly signed value of another entry, moved to this key;
* ``truncated``: the entry's own envelope, cut in half;
* ``other_secret``: the pickle signed under another secret (all three entries: the warning says the secrets differ).

Across the cases each of the two entry kinds meets every attack. In every case the marker never appears, the
fit ends, the three rejections are counted, and each entry is compiled here and replaced, by torch's own store,
with one that verifies.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from runner.config import ConfigError
from runner.config.cache_secret import HEADER_BYTES, SECRET_ENV, SECRET_FILE_ENV, Signer
from runner.config.composing.loading import compose, load
from runner.config.composing.precheck import precheck
from runner.config.schema import Background, CacheTrust, CompileConfig
from runner.stack.caches import LocalCompileCache, save_artifacts
from runner.stack.caches.entries import SignedEntries
from runner.stack.settings import CacheArtifacts
from runner.strategy import CompileStrategy
from tests.helpers import redis_server

SECRET = "the-cluster's-secret-0123456789abcdef"
OTHER_SECRET = b"an attacker's own secret, not the cluster's"
REJECTED = "was rejected before torch read it"
OPENER = SignedEntries(Signer(SECRET.encode()), lambda key, why: None)


class Net(L.LightningModule):
    """The smallest step torch stores real entries for: a two-layer MLP's loss, compiled with its backward."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch: Any, i: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(url: str, cache_dir: Path) -> tuple[dict[str, Any], int]:
    """Two steps of :class:`Net` through the strategy with Inductor, compiled in the run (no process beside it)."""
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
    cfg = CompileConfig(cache=url, cache_dir=str(cache_dir), background=Background.disabled)
    strategy = CompileStrategy(compile=cfg, device="cpu", console=False)
    trainer = L.Trainer(strategy=strategy, max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Net(), torch.utils.data.DataLoader(data, batch_size=16))
    return strategy.figures(), trainer.global_step


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


class Filled:
    """The server after the first fit, what it held then, and the fit's cache artifacts."""

    def __init__(self, url: str, artifacts: dict[str, Path]) -> None:
        self.url = url
        self.good = {key.decode(): _client(url).get(key) for key in _client(url).keys("pt2:*")}
        self.aot = [key for key in self.good if key.startswith("pt2:autograd-experimental::")]
        self.fx = sorted(key for key in self.good if key.startswith("pt2:fx-graph-v1::"))
        self.artifacts = artifacts


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="module")
def filled(server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Filled]:
    url = f"{server}/1"  # a database of its own
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SECRET_ENV, SECRET)
        _, steps = _fit(url, tmp_path_factory.mktemp("cold"))
        assert steps == 2
        out = tmp_path_factory.mktemp("artifacts")
        artifacts = {"signed": out / "signed" / "artifacts.bin", "unsigned": out / "unsigned" / "artifacts.bin"}
        assert save_artifacts(artifacts["signed"])
        env.delenv(SECRET_ENV)
        assert save_artifacts(artifacts["unsigned"])
        yield Filled(url, artifacts)


def _marker_pickle(marker: Path) -> bytes:
    """An entry as torch stores one (JSON, its ``data`` a base64 pickle) whose pickle writes ``marker``."""

    class Plant:
        def __reduce__(self) -> tuple[Any, ...]:
            return exec, (f"open({str(marker)!r}, 'w').write('ran')",)

    return json.dumps({"data": base64.b64encode(pickle.dumps(Plant())).decode(), "time_taken_ms": 1}).encode()


def _attack(kind: str, key: str, filled: Filled, marker: Path) -> bytes:
    plant, good = _marker_pickle(marker), filled.good[key]
    if kind == "bare":
        return plant
    if kind == "kept_signature":
        return good[:HEADER_BYTES] + plant
    if kind == "moved":
        return next(value for other, value in filled.good.items() if other != key)
    if kind == "truncated":
        return good[: len(good) // 2]
    assert kind == "other_secret"
    return SignedEntries(Signer(OTHER_SECRET), lambda k, why: None).seal(key, plant)


def test_the_planted_pickle_runs_when_unpickled_as_torch_does(tmp_path: Path) -> None:
    """What the cases plant is live: read as torch reads a remote entry, it writes its marker."""
    marker = tmp_path / "marker"
    entry = json.loads(_marker_pickle(marker))
    pickle.loads(base64.b64decode(entry["data"]))  # GuardedCache.iterate_over_candidates, before any guard
    assert marker.read_text() == "ran"


@pytest.mark.slow
def test_every_redis_cache_of_torch_writes_signed_and_reads_only_what_verifies(
        server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's own cache classes (FX graph, AOTAutograd, autotune, bundled autotune, Dynamo's PGO: whichever this
    torch has) through the wrapped client, no compile: each value lands sealed under its full key, reads back
    whole, and a value put there unsigned, moved from another key or sealed under another secret is a miss,
    counted; after the fit torch's client is as it was."""
    from torch._inductor import remote_cache

    from runner.stack.caches import RemoteCompileCache

    monkeypatch.setenv(SECRET_ENV, SECRET)
    url, client = f"{server}/2", _client(f"{server}/2")
    classes = [c for c in vars(remote_cache).values()
               if isinstance(c, type) and issubclass(c, remote_cache.RedisRemoteCache)
               and c is not remote_cache.RedisRemoteCache]
    assert {"RemoteFxGraphCache", "RemoteAOTAutogradCache"} <= {c.__name__ for c in classes}
    backend = remote_cache.RedisRemoteCacheBackend
    torch_own = (backend._get, backend._put)
    cache = RemoteCompileCache(url, torch.device("cpu"))
    cache.configure()
    try:
        for n, cls in enumerate(classes):
            torch_cache = cls(f"kind-{n}")
            torch_cache.put("k", {"entry": n})
            [key] = [k.decode() for k in client.keys(f"*kind-{n}*")]
            assert OPENER.open(key, client.get(key)) == json.dumps({"entry": n}).encode()
            assert torch_cache.get("k") == {"entry": n}
            for planted in (json.dumps({"entry": -1}).encode(), OPENER.seal("pt2:elsewhere", b'{"entry": -1}'),
                            SignedEntries(Signer(OTHER_SECRET), lambda k, why: None).seal(key, b'{"entry": -1}')):
                client.set(key, planted)
                assert torch_cache.get("k") is None, cls.__name__
        assert cache.entries_rejected == 3 * len(classes)
        assert cache.figures()["compile/remote_entries_rejected"] == cache.entries_rejected
        assert cache.figures()["compile/remote_cache_status"] == "in use"
    finally:
        cache.teardown()
    assert (backend._get, backend._put) == torch_own


@pytest.mark.slow
def test_unsigned_trust_reads_what_the_server_holds_and_still_signs_what_it_writes(
        server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``compile.cache_trust=unsigned`` with a secret set: torch reads unchecked, as it would alone, and what it
    writes is sealed, so processes that check can use it; the summary's row says so."""
    from torch._inductor.remote_cache import RemoteFxGraphCache

    from runner.stack.caches import RemoteCompileCache

    monkeypatch.setenv(SECRET_ENV, SECRET)
    url, client = f"{server}/3", _client(f"{server}/3")
    cache = RemoteCompileCache(url, torch.device("cpu"), CacheTrust.unsigned)
    cache.configure()
    try:
        assert cache.figures()["compile/remote_cache_status"] == "in use, unsigned (compile.cache_trust=unsigned)"
        graphs = RemoteFxGraphCache("fx-graph-v1")
        graphs.put("k", {"entry": 1})
        [key] = [k.decode() for k in client.keys("pt2:*")]
        assert OPENER.open(key, client.get(key)) == b'{"entry": 1}'
        client.set(key, b'{"entry": 2}')  # unsigned: read as torch would
        assert graphs.get("k") == {"entry": 2} and cache.entries_rejected == 0
    finally:
        cache.teardown()


# (the AOTAutograd entry's attack, the first FX graph's, the second's): each kind meets every attack.
CASES = [("bare", "kept_signature", "moved"), ("kept_signature", "moved", "truncated"),
         ("moved", "truncated", "bare"), ("truncated", "bare", "kept_signature"),
         ("other_secret", "other_secret", "other_secret")]


@pytest.mark.slow
@pytest.mark.parametrize("attacks", CASES, ids=["-".join(c) for c in CASES])
def test_a_planted_entry_is_rejected_counted_compiled_here_and_replaced(
        filled: Filled, attacks: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    assert len(filled.aot) == 1 and len(filled.fx) == 2, filled.good.keys()  # the step's entries, both kinds
    monkeypatch.setenv(SECRET_ENV, SECRET)
    client, marker = _client(filled.url), tmp_path / "marker"
    keys = filled.aot + filled.fx
    planted = {key: _attack(kind, key, filled, marker) for key, kind in zip(keys, attacks, strict=True)}
    for key, value in planted.items():
        client.set(key, value)
    with caplog.at_level(logging.WARNING, logger="runner.stack.caches.remote"):
        figures, steps = _fit(filled.url, tmp_path / "cache")  # an empty local cache directory
    assert steps == 2 and not marker.exists()
    assert figures["compile/remote_entries_rejected"] == 3
    assert figures["compile/remote_cache_hits"] == 0 and figures["compile/remote_cache_misses"] == 3
    for key, value in planted.items():  # compiled here and stored again by torch, signed under the secret
        stored = client.get(key)
        assert stored != value and json.loads(OPENER.open(key, stored) or b"null")["data"]
    warnings = [r.getMessage() for r in caplog.records if REJECTED in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert ("the secrets differ" in warnings[0]) is (attacks[0] == "other_secret")


def test_no_secret_and_no_opt_in_is_refused_before_anything_runs(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.delenv(SECRET_FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    cache = "compile.cache=redis://127.0.0.1:6379"
    with pytest.raises(ConfigError) as refused:
        precheck(["+recipe=smoke", cache])  # what python -m runner runs before Hydra: exit code 2
    message = str(refused.value)
    for part in (f"Set {SECRET_ENV}", SECRET_FILE_ENV, "every process of the cluster", "needs the same one",
                 "compile.cache_trust=unsigned"):
        assert part in message, part
    assert "\n" not in message and not any(tmp_path.iterdir())  # one paragraph; nothing written
    precheck(["+recipe=smoke", cache, "compile.cache_trust=unsigned"])  # the opt-in it names composes and passes
    monkeypatch.setenv(SECRET_ENV, SECRET)
    precheck(["+recipe=smoke", cache])


def _load(path: Path, cache_dir: Path, trust: CacheTrust = CacheTrust.signed) -> dict[str, int]:
    component = LocalCompileCache(str(cache_dir), CacheArtifacts(load_from=path), trust)
    try:
        component.configure()
    finally:
        component.teardown()
    return component.loaded


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


@pytest.mark.slow
def test_artifacts_load_only_when_signed_under_this_secret_or_trusted_unsigned(
        filled: Filled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    signed, unsigned = filled.artifacts["signed"], filled.artifacts["unsigned"]
    assert json.loads(signed.with_suffix(".json").read_text())["signed"] is True
    changed = tmp_path / "changed" / "artifacts.bin"
    changed.parent.mkdir()
    changed.write_bytes(signed.read_bytes()[:-1] + bytes([signed.read_bytes()[-1] ^ 1]))
    monkeypatch.setenv(SECRET_ENV, SECRET)
    refused = {"unsigned": (unsigned, "the artifacts are unsigned"),
               "changed": (changed, "not loaded, since torch unpickles what it loads: its signature does not verify")}
    for name, (path, why) in refused.items():
        with pytest.raises(ValueError, match=why):
            _load(path, tmp_path / "caches" / name)
        assert not _files(tmp_path / "caches" / name), name  # torch never got them: nothing written
        with pytest.raises(ConfigError, match=why):  # and the config check refuses them before the run
            load(compose(["+recipe=smoke", f"reliability.load_cache_artifacts={path.parent}"],
                         run_dir=str(tmp_path)))
    assert _load(signed, tmp_path / "caches" / "signed")["inductor_artifacts"] > 0
    assert _files(tmp_path / "caches" / "signed")  # what the refused ones never wrote
    assert _load(unsigned, tmp_path / "caches" / "trusted", CacheTrust.unsigned)["inductor_artifacts"] > 0
    load(compose(["+recipe=smoke", f"reliability.load_cache_artifacts={unsigned.parent}",
                  "compile.cache_trust=unsigned"], run_dir=str(tmp_path)))  # the opt-in the refusal names
    monkeypatch.setenv(SECRET_ENV, OTHER_SECRET.decode())
    with pytest.raises(ValueError, match="signed under another secret .* the secrets differ"):
        _load(signed, tmp_path / "caches" / "other")
