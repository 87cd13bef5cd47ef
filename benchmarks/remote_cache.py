"""Compile once per cluster: the same step compiled by two processes that share ``compile.cache`` (Redis).

A Redis server (Debian's ``redis-server``) starts on a free localhost port, empty. Then, each in its own
process, the quickstart's GPT step through ``CompileStrategy`` with Inductor, compiled in the run:

1. ``cold``: an empty local cache directory, the empty server: compiles everything and fills both;
2. ``shared``: another empty local cache directory (another rank, machine or sweep job), the same server;
3. ``local warm``: the first process's local cache directory again, no server (the ceiling a shared
   cache could reach: everything on local disk).

On the CPU the shared process also fetches the first one's built C++ kernels (``runner.stack.caches.remote``),
signed and verified: every process gets the same secret (``RUNNER_COMPILE_CACHE_SECRET``, random per run).

Each prints its compile time (the first step's wall time less the median of the next three steps;
Dynamo's tracing, which no cache skips, included) and the remote cache's hits and misses. The ratios are against
``cold`` of the same run. ``--quick`` uses a 1-layer GPT and writes nothing.

    .venv/bin/python benchmarks/remote_cache.py           # writes benchmarks/results/remote_cache.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runner.figures.compile_caches import (
    COMPILE_REMOTE_CACHE_HITS,
    COMPILE_REMOTE_CACHE_MISSES,
    COMPILE_REMOTE_KERNELS_FETCHED,
    COMPILE_REMOTE_KERNELS_UPLOADED,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

CHILD = """
import json, sys, time
import lightning as L, torch
from lightning.pytorch.callbacks import Callback
import runner
from runner.figures.compile_caches import (COMPILE_REMOTE_CACHE_HITS, COMPILE_REMOTE_CACHE_MISSES,
    COMPILE_REMOTE_CACHE_STATUS, COMPILE_REMOTE_KERNELS_FETCHED, COMPILE_REMOTE_KERNELS_REJECTED,
    COMPILE_REMOTE_KERNELS_UPLOADED)
from runner.models.gpt import GPT
from runner.training.module import TrainModule
from functools import partial

n_layer, url, cache_dir = int(sys.argv[1]), sys.argv[2] or None, sys.argv[3]

class Steps(Callback):
    times = []
    def on_train_batch_start(self, trainer, module, batch, i):
        self.t0 = time.perf_counter()
    def on_train_batch_end(self, trainer, module, out, batch, i):
        self.times.append(time.perf_counter() - self.t0)

torch.manual_seed(0)
module = TrainModule(GPT(n_layer=n_layer, n_embd=128, n_head=4, block_size=256),
                     optimizer=partial(torch.optim.AdamW, lr=1e-3))
x = torch.randint(0, 256, (64, 257))
data = torch.utils.data.TensorDataset(x[:, :-1], x[:, 1:])
cfg = runner.CompileConfig(cache=url, cache_dir=cache_dir, background=runner.Background.disabled)
strategy = runner.CompileStrategy(compile=cfg, device="cpu", console=False)
steps = Steps()
L.Trainer(strategy=strategy, max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False, callbacks=[steps]).fit(module, torch.utils.data.DataLoader(data, batch_size=16))
f = strategy.figures()
keep = (COMPILE_REMOTE_CACHE_STATUS, COMPILE_REMOTE_CACHE_HITS, COMPILE_REMOTE_CACHE_MISSES,
        COMPILE_REMOTE_KERNELS_FETCHED, COMPILE_REMOTE_KERNELS_UPLOADED, COMPILE_REMOTE_KERNELS_REJECTED)
steady = sorted(steps.times[1:])[len(steps.times[1:]) // 2]
print("FIGURES " + json.dumps({**{k: f.get(k) for k in keep}, "first_step_s": steps.times[0],
                               "compile_s": steps.times[0] - steady}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SECRET = secrets.token_hex(32)
"""Signs the kernels the processes share (docs/compile-cache.md): the same in every process of the run."""


def _child(n_layer: int, url: str | None, cache_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNNER_COMPILE_CACHE_SECRET": SECRET}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(n_layer), url or "", str(cache_dir)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("FIGURES "))
    return json.loads(line.removeprefix("FIGURES "))  # type: ignore[no-any-return]


def measure(n_layer: int) -> dict[str, Any]:
    server_bin = shutil.which("redis-server")
    if server_bin is None:
        raise SystemExit("redis-server is not installed: apt-get install redis-server")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="bench-remote-cache-") as tmp:
        server = subprocess.Popen([server_bin, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            url = f"redis://127.0.0.1:{port}"
            rows = {"cold": _child(n_layer, url, Path(tmp) / "first"),
                    "shared": _child(n_layer, url, Path(tmp) / "second"),
                    "local warm": _child(n_layer, None, Path(tmp) / "first")}
        finally:
            server.terminate()
            server.wait(timeout=10)
    cold = rows["cold"]["compile_s"]
    for row in rows.values():
        row["compile_vs_cold"] = row["compile_s"] / cold if cold else None
    return rows


def table(rows: dict[str, Any]) -> str:
    lines = ["| process | compile [s] | vs cold | first step [s] | remote hits | remote misses | kernels fetched "
             "| kernels shared |", "|---|---|---|---|---|---|---|---|"]
    keys = (COMPILE_REMOTE_CACHE_HITS, COMPILE_REMOTE_CACHE_MISSES, COMPILE_REMOTE_KERNELS_FETCHED,
            COMPILE_REMOTE_KERNELS_UPLOADED)
    for name, r in rows.items():
        cells = " | ".join(str(r.get(k) if r.get(k) is not None else "-") for k in keys)
        lines.append(f"| {name} | {r['compile_s']:.1f} | {r['compile_vs_cold']:.2f}x | {r['first_step_s']:.1f} "
                     f"| {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 1-layer GPT; writes nothing")
    args = parser.parse_args()
    rows = measure(1 if args.quick else 4)
    text = table(rows)
    print(text)
    if not args.quick:
        import torch

        meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                "command": "python benchmarks/remote_cache.py", "rows": rows}
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "remote_cache.json").write_text(json.dumps(meta, indent=2) + "\n")
        (RESULTS / "remote_cache.md").write_text(
            f"# A shared compile cache ({meta['date']}, torch {meta['torch']}, `{meta['command']}`)\n\n{text}\n")


if __name__ == "__main__":
    main()
