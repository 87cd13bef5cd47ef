"""Per-step host time of ``python -m runner`` against plain Lightning with the same features.

    .venv/bin/python benchmarks/step_host.py            # 5 rounds of 400 steps per contestant (about 4 min)
    .venv/bin/python benchmarks/step_host.py --quick    # 2 rounds of 60 steps
    .venv/bin/python benchmarks/step_host.py --quick --rounds 1 --steps 30 --contestants runner  # the test's

The model is the ``smoke_mlp`` recipe's MLP on its synthetic data, whose compute is small next to the
framework around it, so a step's time is mostly host time. Contestants, each in a process of its own per
round, rounds interleaved (the order rotated each round) so the machine's drift hits all alike:

* ``runner``: ``runner.run.run`` of ``+recipe=smoke_mlp`` (its CSV logger, progress bar, checkpointing,
  telemetry, reliability callbacks and ``CompileStrategy``; the step compiled with Dynamo's eager backend,
  as the recipe has it), ``telemetry.speedup_steps=0`` (the eager pairs are not per-step machinery);
* ``runner_eager``: the same with ``compile=eager`` (nothing compiled: runner's machinery alone);
* ``lightning``: the same ``TrainModule`` and data module in a plain ``L.Trainer`` with Lightning's default
  progress bar, a CSV logger, ``ModelCheckpoint`` at the same interval and the same gradient clipping;
* ``model``: the same model's forward, loss, backward, clipping and AdamW step in a plain loop: the model's
  own time, which "the rest" leaves out.

A quiet step neither logs, validates nor checkpoints; its time runs from one batch start to the next. Per
contestant: the median quiet step over every round; "the rest" = that less the ``model`` median; each ratio
is the median over rounds of the per-round ratio of medians. Writes ``benchmarks/results/step_host.json``.
``--contestants`` races some of them: lightning, whom the ratios are against, always; "the rest" needs ``model``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "step_host.json"
LOG_EVERY, CHECK_EVERY = 10, 100
CONTESTANTS = ("model", "lightning", "runner_eager", "runner")
MIN_STEPS = 25  # quiet steps start at step 20 (_quiet): a few past it

CHILD = r"""
import json, os, sys, time, tempfile
import torch
torch.set_num_threads(1)
import lightning as L
from runner.config.composing.loading import compose, load
from runner.build import build_datamodule, build_module

name, out = sys.argv[1], sys.argv[5]
steps, log_every, check_every = (int(a) for a in sys.argv[2:5])
starts = []

class Clock(L.Callback):
    def on_train_batch_start(self, *args):
        starts.append(time.perf_counter())

overrides = ["+recipe=smoke_mlp", f"trainer.max_steps={steps}", f"trainer.log_every_n_steps={log_every}",
             f"telemetry.log_every_n_steps={log_every}", "telemetry.speedup_steps=0",
             f"trainer.val_check_interval={check_every}", f"trainer.checkpoint_every_n_steps={check_every}",
             "trainer.limit_val_batches=1"]
if name == "runner_eager":
    overrides.append("compile=eager")
run_dir = tempfile.mkdtemp(prefix=f"step-host-{name}-", dir=os.path.dirname(out))  # in the scratch dir: removed
cfg = load(compose(overrides, run_dir=run_dir))
if name.startswith("runner"):
    from runner.run import run
    run(cfg, extra_callbacks=[Clock()])
elif name == "lightning":
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, log_every_n_steps=log_every,
                        val_check_interval=check_every, check_val_every_n_epoch=None, limit_val_batches=1,
                        gradient_clip_val=cfg.trainer.gradient_clip_val, logger=CSVLogger(run_dir),
                        callbacks=[Clock(), ModelCheckpoint(dirpath=run_dir, every_n_train_steps=check_every)])
    trainer.fit(build_module(cfg), datamodule=build_datamodule(cfg))
else:  # model: the same compute in a plain loop
    module, data = build_module(cfg), build_datamodule(cfg)
    data.setup("fit")
    opt = module.configure_optimizers()
    opt = opt["optimizer"] if isinstance(opt, dict) else opt[0][0] if isinstance(opt, tuple) else opt
    def forever():
        while True:
            yield from data.train_dataloader()
    batches = forever()
    for _ in range(steps):
        starts.append(time.perf_counter())
        batch = next(batches)
        loss = module.training_step(batch, 0)
        loss = loss["loss"] if isinstance(loss, dict) else loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.trainer.gradient_clip_val)
        opt.step()
starts.append(time.perf_counter())
json.dump([b - a for a, b in zip(starts, starts[1:])], open(out, "w"))
"""


def _quiet(times: list[float], log_every: int, check_every: int) -> list[float]:
    """Steps 20 on (compiles and first-call costs left out) that neither log, validate nor checkpoint."""
    return [t for i, t in enumerate(times)
            if i >= 20 and i % log_every not in (0, log_every - 1) and i % check_every not in (0, check_every - 1)]


def measure(rounds: int, steps: int, contestants: tuple[str, ...] = CONTESTANTS) -> dict[str, Any]:
    per_round: dict[str, list[float]] = {c: [] for c in contestants}
    every: dict[str, list[float]] = {c: [] for c in contestants}
    with tempfile.TemporaryDirectory(prefix="step-host-") as scratch:
        for r in range(rounds):
            order = contestants[r % len(contestants):] + contestants[:r % len(contestants)]
            for name in order:
                out = Path(scratch) / f"{name}-{r}.json"
                proc = subprocess.run([sys.executable, "-c", CHILD, name, str(steps), str(LOG_EVERY), str(CHECK_EVERY),
                                       str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900,
                                      env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline",
                                           "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
                if proc.returncode != 0:
                    raise RuntimeError(f"{name}: {proc.stderr[-3000:]}")
                quiet = _quiet(json.loads(out.read_text()), LOG_EVERY, CHECK_EVERY)
                per_round[name].append(statistics.median(quiet))
                every[name] += quiet
                print(f"round {r + 1} {name}: {1e6 * per_round[name][-1]:.0f} us", flush=True)
    model = statistics.median(every["model"]) if "model" in every else None
    rows = {}
    for name in contestants:
        step = statistics.median(every[name])
        rows[name] = {"quiet_step_us": 1e6 * step, "rest_us": None if model is None else 1e6 * (step - model),
                      "round_us": [1e6 * t for t in per_round[name]]}
        if name != "lightning":
            rows[name]["vs_lightning"] = statistics.median(
                a / b for a, b in zip(per_round[name], per_round["lightning"], strict=True))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 rounds of 60 steps; writes nothing")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--contestants", default=",".join(CONTESTANTS),
                   help=f"comma-separated, of {', '.join(CONTESTANTS)} (default: all); lightning, whom the ratios "
                        "are against, races always; fewer than all write nothing")
    a = p.parse_args(argv)
    rounds, steps = a.rounds or (2 if a.quick else 5), a.steps or (60 if a.quick else 400)
    asked = {c for c in a.contestants.split(",") if c}
    if unknown := sorted(asked - set(CONTESTANTS)):
        p.error(f"--contestants: no contestant {', '.join(unknown)}; the contestants are {', '.join(CONTESTANTS)}")
    if steps < MIN_STEPS:
        p.error(f"--steps {steps}: at least {MIN_STEPS}, as a step is timed only from step 20 on (compiles and "
                "first calls left out)")
    contestants = tuple(c for c in CONTESTANTS if c in asked | {"lightning"})
    start = time.monotonic()
    rows = measure(rounds, steps, contestants)
    print("\n| contestant | quiet step [us] | the rest [us] | vs lightning (per-round median) |\n|---|---:|---:|---:|")
    for name, row in rows.items():
        ratio = f"{row['vs_lightning']:.3f}" if "vs_lightning" in row else "1"
        rest = "-" if row["rest_us"] is None else f"{row['rest_us']:.0f}"
        print(f"| {name} | {row['quiet_step_us']:.0f} | {rest} | {ratio} |")
    if not a.quick and contestants == CONTESTANTS:
        import torch

        result = {"date": datetime.date.today().isoformat(), "torch": torch.__version__, "rounds": rounds,
                  "steps": steps, "command": "python benchmarks/step_host.py", "wall_s": time.monotonic() - start,
                  "rows": rows}
        OUT.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
