"""Decoding on the CPU: transformers' ``generate`` (its default cache, eager; then its static cache with
``torch.compile``, its best) against runner's decoder (``runner/models/decode.py``), side by side.

    .venv/bin/python benchmarks/generate.py           # full run: batch 1 and 16, 128 new tokens, Inductor (~6 min)
    .venv/bin/python benchmarks/generate.py --quick   # a tiny model, 8 new tokens, Dynamo's eager backend (plumbing)

A Llama-style model (hidden 256, 4 layers, 8 heads over 4 key-value heads, 32,000 ids, random weights: tokens/s
does not depend on what the weights say) writes greedily after prompts of mixed lengths (8 to 64 tokens, seeded).
Each contestant runs in its own process, one thread: a first call (its compile), then ``--repeats`` timed calls; the
best timed call counts. The contestants run twice, in order and reversed, and each figure is the better of its two
processes, so that a drift of the machine does not favour the one that ran first. Every contestant's tokens must equal
transformers' eager ones (the row says when not). Time to the first token: transformers' through its streamer's first
new token, runner's as its decoder reports it. Targets (issue 83): runner >= 2x transformers' eager and >= 1.2x its
static cache + compile, at both batch sizes. Writes ``benchmarks/results/generate.json`` (``--out``; none with
``--quick`` unless given).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "generate.json"
CONTESTANTS = ("transformers_eager", "transformers_static_compile", "runner")


def _model(quick: bool) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    width = 64 if quick else 256
    config = LlamaConfig(vocab_size=1000 if quick else 32_000, hidden_size=width, intermediate_size=4 * width,
                         num_hidden_layers=2 if quick else 4, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


def _prompts(batch: int, vocab: int) -> list[list[int]]:
    rng = random.Random(batch)
    return [[1] + [rng.randrange(3, vocab) for _ in range(rng.randrange(8, 64))] for _ in range(batch)]


def _transformers(model: Any, prompts: list[list[int]], new: int, static: bool, backend: str) -> tuple[Any, float]:
    """transformers' ``generate`` over left-padded prompts: the new tokens and the seconds to the first one."""
    import torch
    from transformers.generation.configuration_utils import CompileConfig
    from transformers.generation.streamers import BaseStreamer

    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1

    class FirstToken(BaseStreamer):  # put() gets the prompt, then each new token
        def __init__(self) -> None:
            self.times: list[float] = []

        def put(self, value: Any) -> None:
            self.times.append(time.perf_counter())

        def end(self) -> None:
            pass

    extra: dict[str, Any] = {}
    if static:
        compile_config = CompileConfig(fullgraph=True, backend=backend)
        compile_config._compile_all_devices = True  # transformers compiles on a GPU only, unless told
        extra = {"cache_implementation": "static", "compile_config": compile_config}
    streamer = FirstToken()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, pad_token_id=0, streamer=streamer, **extra)
    first = streamer.times[1] - start
    return out[:, width:].tolist(), first


def contestant(name: str, batch: int, new: int, repeats: int, quick: bool, backend: str) -> dict[str, Any]:
    """One contestant's figures, in this process."""
    import torch

    torch.set_num_threads(1)
    model = _model(quick)
    prompts = _prompts(batch, model.config.vocab_size)
    if name == "runner":
        from runner.models.decode import Decoder, Sampling

        decoder = Decoder(model, backend=backend)
        sampling = Sampling(max_new_tokens=new, temperature=0)

        def call() -> tuple[Any, float]:
            out = decoder.generate(prompts, sampling)
            return out.tokens, out.first_token_s
    else:
        def call() -> tuple[Any, float]:
            return _transformers(model, prompts, new, name == "transformers_static_compile", backend)
    start = time.perf_counter()
    tokens, _ = call()
    first_call_s = time.perf_counter() - start
    best, first_token = float("inf"), float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        tokens, ttft = call()
        best, first_token = min(best, time.perf_counter() - start), min(first_token, ttft)
    return {"contestant": name, "batch": batch, "new_tokens": new, "first_call_s": round(first_call_s, 2),
            "seconds": round(best, 4), "tokens_per_s": round(batch * new / best, 1),
            "first_token_s": round(first_token, 4), "tokens": tokens}


def _in_process(name: str, a: argparse.Namespace, batch: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--one", name, "--batch", str(batch), "--new", str(a.new),
            "--repeats", str(a.repeats), "--backend", a.backend, *(["--quick"] if a.quick else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        return {"contestant": name, "batch": batch, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny model, 8 new tokens, eager backend (plumbing)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    p.add_argument("--new", type=int, default=None, help="new tokens a prompt (default 128; --quick: 8)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls a process (default 3; --quick: 1)")
    p.add_argument("--backend", default=None, help="torch.compile backend (default inductor; --quick: eager)")
    p.add_argument("--one", choices=CONTESTANTS, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    a.new = a.new or (8 if a.quick else 128)
    a.repeats = a.repeats or (1 if a.quick else 3)
    a.backend = a.backend or ("eager" if a.quick else "inductor")
    if a.one:
        print(json.dumps(contestant(a.one, a.batch, a.new, a.repeats, a.quick, a.backend)))
        return
    rows = []
    for batch in a.batches:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTESTANTS}
        for order in (CONTESTANTS, CONTESTANTS[::-1]):
            for name in order:
                runs[name].append(_in_process(name, a, batch))
        reference = next((r["tokens"] for r in runs["transformers_eager"] if "tokens" in r), None)
        for name in CONTESTANTS:
            good = [r for r in runs[name] if "seconds" in r]
            row = min(good, key=lambda r: r["seconds"]) if good else runs[name][0]
            row["same_tokens_as_eager"] = row.get("tokens") == reference if reference is not None else None
            rows.append({k: v for k, v in row.items() if k != "tokens"})
    for batch in a.batches:
        base = {r["contestant"]: r for r in rows if r["batch"] == batch and "seconds" in r}
        for r in rows:
            if r["batch"] == batch and "seconds" in r:
                for peer in ("transformers_eager", "transformers_static_compile"):
                    if peer in base:
                        r[f"speedup_vs_{peer}"] = round(base[peer]["seconds"] / r["seconds"], 2)
    print("| contestant | batch | tokens/s | first token [s] | first call [s] | vs eager | vs static+compile | "
          "same tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['contestant']} | {r['batch']} | {r.get('tokens_per_s', r.get('error'))} | "
              f"{r.get('first_token_s', '')} | {r.get('first_call_s', '')} | "
              f"{r.get('speedup_vs_transformers_eager', '')} | "
              f"{r.get('speedup_vs_transformers_static_compile', '')} | {r.get('same_tokens_as_eager', '')} |")
    out = a.out or (None if a.quick else OUT)
    if out is not None:
        out.write_text(json.dumps({"rows": rows, "new_tokens": a.new, "backend": a.backend}, indent=2) + "\n")


if __name__ == "__main__":
    main()
