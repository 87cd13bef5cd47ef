"""``compile.cache``: a real Redis server shared by processes that compile the same step.

The server is Debian's ``redis-server`` (``.ci/run`` installs it), started here on a free localhost port
and stopped after the tests. A first process compiles cold and fills it; a second, with an empty local
cache directory, finds the same graphs there. A server that is not there is a warning and a local compile.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
REDIS = shutil.which("redis-server")



@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis server of this module's own, on a free localhost port, with nothing persisted."""
    if REDIS is None:
        pytest.skip("redis-server is not installed (Debian's redis-server package; .ci/run installs it)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    from runner.stack.caches.remote import ping

    deadline = time.monotonic() + 10
    while ping(url) is not None:
        assert server.poll() is None and time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


# One process of a cluster: a tiny MLP's step through CompileStrategy with Inductor, compiled in the run,
# with a local cache directory of its own; prints the stack's figures.
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

torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
cfg = runner.CompileConfig(cache=sys.argv[1], cache_dir=sys.argv[2], background=runner.Background.disabled)
strategy = runner.CompileStrategy(compile=cfg, device="cpu", console=False)
L.Trainer(strategy=strategy, max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False).fit(M(), torch.utils.data.DataLoader(data, batch_size=16))
print("FIGURES " + json.dumps({k: v for k, v in strategy.figures().items() if "remote" in k}))
"""


def _fit(url: str, cache_dir: Path) -> tuple[dict[str, object], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", FIT, url, str(cache_dir)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("FIGURES "))
    return json.loads(line.removeprefix("FIGURES ")), proc.stderr


@pytest.mark.slow
def test_a_second_process_with_an_empty_local_cache_compiles_from_the_shared_one(redis_url: str,
                                                                                 tmp_path: Path) -> None:
    first, _ = _fit(redis_url, tmp_path / "first")
    assert first["compile/remote_cache_status"] == "in use"
    assert first["compile/remote_cache_hits"] == 0 and int(first["compile/remote_cache_misses"]) > 0  # type: ignore[call-overload]
    # The first built its C++ kernels and shared them (on the CPU the remote graph entries hold source only).
    assert int(first["compile/remote_kernels_uploaded"]) > 0 and first["compile/remote_kernels_fetched"] == 0  # type: ignore[call-overload]
    second, _ = _fit(redis_url, tmp_path / "second")  # another local cache directory: empty
    assert second["compile/remote_cache_misses"] == 0
    assert second["compile/remote_cache_hits"] == first["compile/remote_cache_misses"]
    # Every kernel came from the server and none was built here: nothing new to upload.
    assert second["compile/remote_kernels_fetched"] == first["compile/remote_kernels_uploaded"]
    assert second["compile/remote_kernels_uploaded"] == 0
    built = {p.name for p in (tmp_path / "second").rglob("*.so")}
    assert len(built) == second["compile/remote_kernels_fetched"]


def test_a_server_that_is_not_there_is_a_warning_and_a_local_compile(tmp_path: Path) -> None:
    import lightning as L
    import torch

    import runner
    from tests.helpers import tiny_data, tiny_module

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


def test_a_malformed_address_is_refused_before_the_run(tmp_path: Path) -> None:
    from runner.config import ConfigError
    from runner.config.loading import compose, load

    with pytest.raises(ConfigError, match=r"compile.cache=http://cache:6379 is not a Redis address.*redis://HOST:PORT"):
        load(compose(["+recipe=smoke", "compile.cache=http://cache:6379"], run_dir=str(tmp_path)))
    cfg = load(compose(["+recipe=smoke", "compile.cache=redis://127.0.0.1:6379"], run_dir=str(tmp_path)))
    assert cfg.compile.cache == "redis://127.0.0.1:6379"  # the suggested form composes
