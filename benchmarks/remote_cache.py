"""Compile once per cluster: the same step compiled by two processes that share ``compile.cache`` (Redis).

A Redis server (Debian's ``redis-server``) starts on a free localhost port, empty. Then, each in its own
process, the quickstart's GPT step through ``CompileStrategy`` with Inductor, compiled in the run:

1. ``cold``: an empty local cache directory, the empty server: compiles everything and fills both;
2. ``shared``: another empty local cache directory (another rank, machine or sweep job), the same server;
3. ``local warm``: the first process's local cache directory again, no server (the ceiling a shared
   cache could reach: everything on local disk).

Every entry is signed: each process holds the same secret (``RUNNER_COMPILE_CACHE_SECRET``, random per run), so
torch's own entries (FX graphs, AOTAutograd) are sealed on the way to the server and verified before torch reads
them (``runner.stack.caches.entries``), and on the CPU the shared process also fetches the first one's built C++
kernels, signed and verified (``runner.stack.caches.remote``).

Each prints its compile time (the first step's wall time less the median of the next three steps;
Dynamo's tracing, which no cache skips, included) and the remote cache's hits, misses and rejections. The ratios
are against ``cold`` of the same run; the target is ``shared`` under 0.25x. Then the signing cost: every entry
the server holds once the processes are done is checked again here, as a process reading it does (torch's
entries and the kernels), and sealed again, as the writer did, each pass repeated and its median taken; it is
shown beside the shared process's compile. ``--quick`` uses a 1-layer GPT and writes nothing.

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

from runner.config.cache_secret import TAG, Signer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

CHILD = """
import json, sys, time
import lightning as L, torch
from lightning.pytorch.callbacks import Callback
import runner
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
keep = ("compile/remote_cache_status", "compile/remote_cache_hits", "compile/remote_cache_misses",
        "compile/remote_entries_rejected", "compile/remote_kernels_fetched", "compile/remote_kernels_uploaded",
        "compile/remote_kernels_rejected")
remote = strategy.stack.parts.remote_cache  # a no-op component without a server (local warm)
print("KERNELS " + json.dumps({"key": getattr(remote, "kernels_key", None),
                               "context": getattr(remote, "context", None)}))
steady = sorted(steps.times[1:])[len(steps.times[1:]) // 2]
print("FIGURES " + json.dumps({**{k: f.get(k) for k in keep}, "first_step_s": steps.times[0],
                               "compile_s": steps.times[0] - steady}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SECRET = secrets.token_hex(32)
"""Signs every entry the processes share (docs/compile-cache.md): the same in every process of the run."""
TARGET_X = 0.25
"""The shared process's compile against cold's that a shared cache must stay under, every entry signed."""
REPEATS = 20


def _child(n_layer: int, url: str | None, cache_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNNER_COMPILE_CACHE_SECRET": SECRET}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(n_layer), url or "", str(cache_dir)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    figures = {}
    for prefix in ("FIGURES ", "KERNELS "):
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(prefix))
        figures.update(json.loads(line.removeprefix(prefix)))
    return figures


def _median_s(action: Any) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return sorted(times)[REPEATS // 2]


def signing_cost(url: str, kernels_key: str, context: str) -> dict[str, Any]:
    """What the signatures cost a process, on the entries the server holds now: verifying every one (torch's
    entries as ``SignedEntries.open`` does, each kernel as ``kernels.open_entry`` does, ELF check included)
    and sealing every one again; the medians of ``REPEATS`` passes. Also whether every entry is signed."""
    import redis

    from runner.stack.caches.entries import SignedEntries
    from runner.stack.caches.kernels import open_entry, sign

    client = redis.Redis.from_url(url)
    graphs = {key.decode(): client.get(key) for key in client.keys("pt2:*")}
    kernels = {name.decode(): value for name, value in client.hgetall(kernels_key).items()}
    client.close()
    entries = SignedEntries(Signer(SECRET.encode()), lambda key, why: None)
    opened = {key: entries.open(key, value) for key, value in graphs.items()}
    contents = {name: open_entry(SECRET.encode(), name, context, value)[0] for name, value in kernels.items()}
    unsigned = sum(1 for v in graphs.values() if not v.startswith(TAG)) + sum(c is None for c in contents.values())
    rejected = sum(v is None for v in opened.values())
    verify_s = _median_s(lambda: ([entries.open(k, v) for k, v in graphs.items()],
                                  [open_entry(SECRET.encode(), n, context, v) for n, v in kernels.items()]))
    seal_s = _median_s(lambda: ([entries.seal(k, v) for k, v in opened.items() if v is not None],
                                [sign(SECRET.encode(), n, context, c) for n, c in contents.items() if c is not None]))
    return {"graph_entries": len(graphs), "kernel_entries": len(kernels), "not_verified": unsigned + rejected,
            "bytes": sum(map(len, graphs.values())) + sum(map(len, kernels.values())),
            "verify_all_ms": verify_s * 1e3, "seal_all_ms": seal_s * 1e3}


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
            cost = signing_cost(url, rows["cold"]["key"], rows["cold"]["context"])
        finally:
            server.terminate()
            server.wait(timeout=10)
    cold = rows["cold"]["compile_s"]
    for row in rows.values():
        row["compile_vs_cold"] = row["compile_s"] / cold if cold else None
    cost["verify_vs_shared_compile"] = cost["verify_all_ms"] / 1e3 / rows["shared"]["compile_s"]
    return {"rows": rows, "signing": cost}


def table(rows: dict[str, Any]) -> str:
    lines = ["| process | compile [s] | vs cold | first step [s] | remote hits | remote misses | kernels fetched "
             "| kernels shared |", "|---|---|---|---|---|---|---|---|"]
    keys = ("compile/remote_cache_hits", "compile/remote_cache_misses", "compile/remote_kernels_fetched",
            "compile/remote_kernels_uploaded")
    lines[0] += " entries rejected |"
    lines[1] += "---|"
    for name, r in rows.items():
        cells = " | ".join(str(r.get(k) if r.get(k) is not None else "-") for k in keys)
        rejected = r.get("compile/remote_entries_rejected")
        lines.append(f"| {name} | {r['compile_s']:.1f} | {r['compile_vs_cold']:.2f}x | {r['first_step_s']:.1f} "
                     f"| {cells} | {rejected if rejected is not None else '-'} |")
    return "\n".join(lines)


def verdict(result: dict[str, Any]) -> str:
    """The target and the signing cost, in words."""
    shared, cost = result["rows"]["shared"]["compile_vs_cold"], result["signing"]
    met = "met" if shared < TARGET_X else "MISSED"
    signed = "yes" if cost["not_verified"] == 0 else f"NO, {cost['not_verified']} did not verify"
    return (f"shared (empty local cache) vs cold: {shared:.2f}x, target < {TARGET_X}x: {met}; every entry signed: "
            f"{signed}.\nSigning cost: the server's {cost['graph_entries']} graph entries and "
            f"{cost['kernel_entries']} kernels ({cost['bytes'] / 2**20:.1f} MiB) verify in "
            f"{cost['verify_all_ms']:.1f} ms ({cost['verify_vs_shared_compile']:.2%} of the shared process's compile) "
            f"and seal in {cost['seal_all_ms']:.1f} ms (medians of {REPEATS} passes).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 1-layer GPT; writes nothing")
    args = parser.parse_args()
    result = measure(1 if args.quick else 4)
    text = table(result["rows"]) + "\n\n" + verdict(result)
    print(text)
    if not args.quick:
        import torch

        meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                "command": "python benchmarks/remote_cache.py", **result}
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "remote_cache.json").write_text(json.dumps(meta, indent=2) + "\n")
        (RESULTS / "remote_cache.md").write_text(
            f"# A shared compile cache ({meta['date']}, torch {meta['torch']}, `{meta['command']}`)\n\n{text}\n")


if __name__ == "__main__":
    main()
