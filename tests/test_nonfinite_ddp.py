"""2-process CPU DDP (gloo): a loss that is nan on rank 1 only makes every rank take the same decision.

``stop`` stops both ranks at the same step (no rank waits at the checkpoint barrier for a rank that is
in backward's all-reduce), with last.ckpt saved; ``skip`` skips the step on both ranks, so the
weights stay identical and finite (a rank that stepped would apply the gradients the all-reduce made
nan on every rank).

The same runs carry ``CompileTelemetry``: its throughput is the sum of the ranks' measured rates.

With ``check_every=2`` the flag is read every second step: the nan of step 3 is read after step 3's
update, on both ranks at the same step, and nothing is saved (the weights took that update).

The file is also the script each rank runs (``python -m tests.test_nonfinite_ddp POLICY DIR [cpu|cuda] [N]``):
Lightning's launcher re-executes it for rank 1, so the fit cannot run inside pytest itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = 6
BAD_BATCH = 2  # rank 1's third batch (step 3) is nan; rank 0 never sees one


def _fit(policy: str, out_dir: Path, accelerator: str = "cpu", check_every: int | None = None) -> None:
    import lightning as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from runner.config.schema import CompileConfig, OnNonFinite, OptimizerPolicy, Scope, TelemetryConfig
    from runner.reliability import NonFiniteGuard, NonFiniteLossError
    from runner.strategy import DDPCompileStrategy
    from runner.telemetry import CompileTelemetry

    class Regression(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(4, 1)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class RankData(L.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            rank = self.trainer.global_rank if self.trainer is not None else 0
            g = torch.Generator().manual_seed(rank)
            batches = []
            for i in range(STEPS):
                x, y = torch.randn(4, 4, generator=g), torch.randn(4, 1, generator=g)
                if rank == 1 and i == BAD_BATCH:
                    x = torch.full_like(x, float("nan"))
                batches.append((x, y))
            return DataLoader(batches, batch_size=None, shuffle=False)  # type: ignore[arg-type]

    guard = NonFiniteGuard(OnNonFinite(policy), out_dir / "last.ckpt", check_every=check_every)
    telemetry = CompileTelemetry(TelemetryConfig(log_every_n_steps=2, speedup_steps=0))
    compile = CompileConfig(scope=Scope.step, backend="eager", optimizer=OptimizerPolicy.none)
    strategy = DDPCompileStrategy(compile=compile, process_group_backend="gloo" if accelerator == "cpu" else "nccl")
    trainer = L.Trainer(accelerator=accelerator, devices=2, strategy=strategy, max_steps=STEPS, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, use_distributed_sampler=False, callbacks=[guard, telemetry])
    module = Regression()
    error = None
    try:
        trainer.fit(module, RankData())
    except NonFiniteLossError as exc:
        error = str(exc)
    result = {"rank": trainer.global_rank, "steps": trainer.global_step, "skipped": guard.skipped, "error": error,
              "reads": guard.reads,
              "params": [p.detach().flatten().tolist() for p in module.parameters()],
              "samples_per_s": telemetry.figures().get("perf/samples_per_s"),
              "local_samples_per_s": telemetry.meter.rate("samples")}
    # A file per rank: the ranks share one stdout pipe, where their lines can interleave.
    (out_dir / f"result_{trainer.global_rank}.json").write_text(json.dumps(result))


def _launch(policy: str, out_dir: Path, accelerator: str = "cpu", timeout: float = 240,
            check_every: int = 0) -> dict[int, dict[str, Any]]:
    """Run the 2-rank fit; a rank that hangs fails the test after ``timeout`` (both ranks killed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNNER_CACHE_DIR": str(out_dir / "cache")}
    cmd = [sys.executable, "-m", "tests.test_nonfinite_ddp", policy, str(out_dir), accelerator, str(check_every)]
    # Its own process group: rank 1 (started by Lightning from rank 0) is killed with it on a hang.
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the ranks hung ({timeout} s):\n{out[-2000:]}\n{err[-4000:]}") from None
    files = sorted(out_dir.glob("result_*.json"))
    assert len(files) == 2, f"rc={proc.returncode}\n{out[-2000:]}\n{err[-4000:]}"
    results = [json.loads(f.read_text()) for f in files]
    return {r["rank"]: r for r in results}


@pytest.mark.slow
def test_stop_stops_every_rank_at_the_same_step(tmp_path: Path) -> None:
    ranks = _launch("stop", tmp_path)
    for rank, r in ranks.items():
        assert r["error"] is not None, f"rank {rank} did not stop"
        assert r["error"].startswith(f"non-finite training loss (nan on {'rank 1' if rank else 'another rank'}) "
                                     f"at step {BAD_BATCH + 1}"), r["error"]
        assert r["steps"] == BAD_BATCH  # stopped before the bad step's update, on both ranks
    assert ranks[0]["params"] == ranks[1]["params"]
    import torch

    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == BAD_BATCH  # the last good state, written once (rank 0)


@pytest.fixture(scope="module")
def skip_run(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    return _launch("skip", tmp_path_factory.mktemp("skip"))


@pytest.mark.slow
def test_skip_skips_the_step_on_every_rank(skip_run: dict[int, dict[str, Any]]) -> None:
    ranks = skip_run
    for r in ranks.values():
        assert r["error"] is None and r["steps"] == STEPS
        assert r["skipped"] == [BAD_BATCH + 1]
        assert all(v == v for p in r["params"] for v in p), "nan weights: a rank applied nan gradients"
    assert ranks[0]["params"] == ranks[1]["params"]  # identical: no rank stepped alone


@pytest.mark.slow
def test_ddp_throughput_is_the_sum_of_the_ranks_rates(skip_run: dict[int, dict[str, Any]]) -> None:
    """perf/samples_per_s under DDP: every rank's own measured rate, summed (not rank 0's times 2)."""
    local = [skip_run[rank]["local_samples_per_s"] for rank in (0, 1)]
    assert all(rate and rate > 0 for rate in local)
    for r in skip_run.values():
        assert r["samples_per_s"] == pytest.approx(sum(local))


@pytest.mark.slow
def test_a_deferred_read_stops_every_rank_at_the_same_step_and_saves_nothing(tmp_path: Path) -> None:
    ranks = _launch("stop", tmp_path, check_every=2)
    for rank, r in ranks.items():
        assert r["error"] is not None, f"rank {rank} did not stop"
        assert f"at step {BAD_BATCH + 1}, read after step {BAD_BATCH + 1}" in r["error"], r["error"]
        assert r["steps"] == BAD_BATCH + 1 and r["reads"] == 2  # read after steps 2 and 4 only
    assert not (tmp_path / "last.ckpt").exists()  # step 3's update ran: nothing of now is saved


if __name__ == "__main__":
    _fit(sys.argv[1], Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "cpu",
         int(sys.argv[4]) or None if len(sys.argv) > 4 else None)
