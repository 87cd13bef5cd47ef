"""The data layer at scale: preparing and loading a 200 MB text corpus and a 1M-row labelled CSV, and whether the
loader keeps up with the quickstart GPT.

    .venv/bin/python benchmarks/data.py            # the run of record: writes benchmarks/results/data.json
    .venv/bin/python benchmarks/data.py --quick    # 4 MB and 20,000 rows, eager steps: the plumbing (writes nothing)

Generated first, in a scratch directory (not timed): a corpus of random words in 10 MB text files, a CSV of
``review,stars`` rows (4 label names), and a byte-level BPE tokenizer trained on the corpus's first megabyte.
Each measurement is a fresh process (its own peak memory, nothing cached in it) on one ``HF_DATASETS_CACHE``:

* prepare: a data module's ``setup`` on files ``datasets`` has not seen (the first run: Arrow preparation and
  the tokenizing ``map``), then again (the second run: everything read from the cache). For the corpus as bytes
  (``data=text``, the quickstart's data), with the saved BPE tokenizer, and the CSV for the classifier;
  seconds, peak RSS (``ru_maxrss``, which counts the memory-mapped pages a process touched) and the anonymous
  memory held at the end (what the process itself allocated: a corpus read into memory would show here);
* loader: the quickstart recipe (runner's 4-layer GPT, packed windows of 256 bytes, batch 16) trained on the
  corpus for ``--steps`` steps, ``compile.backend`` as given; each ``next()`` on the training loader is timed
  inside the step it belongs to. The wait share is the loader's time over the step's (a step runs from one
  batch start to the next), over the steps after the first fifth; the target is under 5%.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "data.json"
WORDS = 4096
FILE_BYTES = 10 << 20
LABELS = ("bad", "fine", "good", "great")


def _vocabulary(rng: random.Random) -> list[str]:
    return ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(WORDS)]


def make_corpus(root: Path, total: int) -> Path:
    """``total`` bytes of random words (lines of 5-25 words, a blank line every 8 lines) in files of 10 MB."""
    rng = random.Random(0)
    vocab = _vocabulary(rng)
    root.mkdir(parents=True)
    written, index = 0, 0
    while written < total:
        size = min(FILE_BYTES, total - written)
        lines, n = [], 0
        while n < size:
            line = " ".join(rng.choices(vocab, k=rng.randint(5, 25))) + ("\n\n" if rng.random() < 0.125 else "\n")
            lines.append(line)
            n += len(line)
        data = "".join(lines).encode()[:size]
        (root / f"part{index:03d}.txt").write_bytes(data)
        written, index = written + len(data), index + 1
    return root


def make_csv(path: Path, rows: int) -> Path:
    """``rows`` labelled rows: a review of 5-60 random words and one of four label names."""
    rng = random.Random(1)
    vocab = _vocabulary(rng)
    with path.open("w") as f:
        f.write("review,stars\n")
        for i in range(rows):
            f.write(f"{' '.join(rng.choices(vocab, k=rng.randint(5, 60)))},{LABELS[i % 4]}\n")
    return path


def make_tokenizer(directory: Path, corpus: Path) -> Path:
    """A byte-level BPE tokenizer of 8,192 ids trained on the corpus's first megabyte (offline)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = next(iter(sorted(corpus.iterdir()))).read_text()[: 1 << 20].splitlines()
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=8192, special_tokens=["<pad>", "<unk>", "</s>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                            eos_token="</s>").save_pretrained(directory)
    return directory


# -- the measured processes ---------------------------------------------------------------------------------------
def _anon_mib() -> float:
    """Anonymous memory this process holds now (RssAnon), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_prepare(kind: str, path: str, tokenizer: str) -> dict[str, Any]:
    """One data module's setup, timed; what it read and what the cache gave."""
    import logging


    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    from runner.data.classification import TextClassificationDataModule
    from runner.data.text import TextDataModule

    logging.getLogger("runner.data").addHandler(Keep())
    logging.getLogger("runner.data").setLevel(logging.INFO)
    import datasets  # noqa: F401  (imported before the clock starts: imports are not preparation)
    import transformers  # noqa: F401

    base = _anon_mib()
    start = time.perf_counter()
    if kind == "csv":
        dm: Any = TextClassificationDataModule(path=path, text_column="review", label_column="stars", num_classes=4,
                                               max_examples=None, seq_len=128)
    else:
        dm = TextDataModule(path=path, tokenizer=tokenizer or None, max_bytes=None, seq_len=256)
    dm.setup("fit")
    next(iter(dm.train_dataloader()))
    seconds = time.perf_counter() - start
    figures = dm.figures()
    return {"s": round(seconds, 3), "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "anon_mib": round(_anon_mib() - base, 1), "rows": figures["data/rows"], "tokens": figures["data/tokens"],
            "train_sequences": len(dm._train), "from_cache": sum("cache" in r and "not" in r or "nothing to prepare"
                                                                  in r for r in records)}


def child_loader(corpus: str, steps: int, backend: str, run_dir: str) -> dict[str, Any]:
    """The quickstart recipe on the corpus: per step, the time in the loader's ``next()`` against the step's."""
    import statistics

    import lightning as L
    from torch.utils.data import DataLoader

    from runner.build import build_datamodule, build_module, build_strategy
    from runner.config.composing.loading import compose, load

    cfg = load(compose(["+recipe=quickstart", f"data.path={corpus}", "data.max_bytes=null",
                        f"trainer.max_steps={steps}", f"compile.backend={backend}", "compile.background=disabled",
                        "telemetry.speedup_steps=0"], run_dir=run_dir))
    waits: list[float] = []
    starts: list[float] = []

    class Timed(DataLoader):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            it = super().__iter__()
            while True:
                t = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                waits.append(time.perf_counter() - t)
                yield batch

    class Clock(L.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            starts.append(time.perf_counter())

    dm = build_datamodule(cfg)
    original = dm.train_dataloader

    def timed() -> DataLoader:  # type: ignore[type-arg]
        loader = original()
        loader.__class__ = Timed
        return loader

    dm.train_dataloader = timed  # type: ignore[method-assign]
    trainer = L.Trainer(strategy=build_strategy(cfg), max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, callbacks=[Clock()])
    trainer.fit(build_module(cfg), datamodule=dm)
    skip = max(2, steps // 5)
    step_s = [b - a for a, b in zip(starts[skip:], starts[skip + 1:], strict=False)]
    wait_s = waits[skip + 1:skip + 1 + len(step_s)]  # the fetch of batch i+1 lies inside step i
    return {"steps_timed": len(step_s), "median_step_ms": round(1e3 * statistics.median(step_s), 3),
            "median_wait_ms": round(1e3 * statistics.median(wait_s), 4),
            "wait_share_pct": round(100 * sum(wait_s) / sum(step_s), 3),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(mb: int, rows: int, steps: int, backend: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-data-") as scratch:
        tmp = Path(scratch)
        start = time.perf_counter()
        corpus, csv = make_corpus(tmp / "corpus", mb << 20), make_csv(tmp / "rows.csv", rows)
        tokenizer = make_tokenizer(tmp / "tokenizer", corpus)
        print(f"generated {mb} MB of text, {rows} CSV rows and a tokenizer in {time.perf_counter() - start:.0f} s",
              flush=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_CACHE": str(tmp / "cache"),
               "WANDB_MODE": "offline"}
        prepare: dict[str, Any] = {}
        for name, kind, path, tok in (("text, bytes", "text", corpus, ""), ("text, BPE", "text", corpus, tokenizer),
                                      ("CSV, classifier", "csv", csv, "")):
            prepare[name] = {run: _child(["prepare", kind, str(path), str(tok)], env) for run in ("first", "second")}
            print(f"{name}: {prepare[name]}", flush=True)
        loader = _child(["loader", str(corpus), str(steps), backend, str(tmp / "run")], env)
        print(f"loader: {loader}", flush=True)
    return {"prepare": prepare, "loader": loader, "corpus_mb": mb, "csv_rows": rows}


def render(result: dict[str, Any]) -> str:
    lines = [f"# benchmarks/data.py ({result['date']}, {result['machine']})", "",
             f"{result['corpus_mb']} MB of text in 10 MB files; {result['csv_rows']:,} CSV rows.", "",
             "| data | first run [s] | second run [s] | peak RSS first / second [MiB] | anon memory [MiB] | rows | "
             "tokens |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, runs in result["prepare"].items():
        a, b = runs["first"], runs["second"]
        lines.append(f"| {name} | {a['s']} | {b['s']} | {a['peak_rss_mib']} / {b['peak_rss_mib']} | "
                     f"{a['anon_mib']} / {b['anon_mib']} | {a['rows']:,} | {a['tokens']:,} |")
    lo = result["loader"]
    lines += ["", f"Quickstart GPT on the corpus ({result['args']['backend']}, {lo['steps_timed']} steps timed): "
              f"median step {lo['median_step_ms']} ms, median loader wait {lo['median_wait_ms']} ms, "
              f"wait share {lo['wait_share_pct']}% (target < 5%)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        kind, rest = argv[1], argv[2:]
        out = child_prepare(*rest) if kind == "prepare" else child_loader(rest[0], int(rest[1]), rest[2], rest[3])
        print(json.dumps(out))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 MB, 20,000 rows, 30 eager steps; writes nothing")
    p.add_argument("--mb", type=int, default=None, help="MB of text (default 200)")
    p.add_argument("--rows", type=int, default=None, help="CSV rows (default 1,000,000)")
    p.add_argument("--steps", type=int, default=None, help="training steps of the loader measurement (default 200)")
    p.add_argument("--backend", default=None, help="compile.backend of the loader measurement (default inductor)")
    p.add_argument("--out", type=Path, default=None, help=f"results file (default {OUT.relative_to(ROOT)})")
    args = p.parse_args(argv)
    quick = args.quick
    settings = {"mb": args.mb or (4 if quick else 200), "rows": args.rows or (20_000 if quick else 1_000_000),
                "steps": args.steps or (30 if quick else 200), "backend": args.backend or ("eager" if quick else
                                                                                           "inductor")}
    result = measure(**settings)
    result.update(date=datetime.date.today().isoformat(), args=settings,
                  machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(render(result))
    out = args.out or (None if quick else OUT)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        out.with_suffix(".md").write_text(render(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
