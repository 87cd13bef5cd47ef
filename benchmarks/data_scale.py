"""Instruction data at scale: time from the command to the first training step, and peak resident memory, on
generated Alpaca rows, cold (nothing cached) and warm (the same data again), against TRL's ``SFTTrainer``.

    .venv/bin/python benchmarks/data_scale.py            # 2k (the reference), 10k, 100k and 1M rows: the run of record
    .venv/bin/python benchmarks/data_scale.py --quick    # 300 and 1,000 rows, bytes only, one round (plumbing)
    .venv/bin/python benchmarks/data_scale.py --prepare  # chat, preference and Alpaca preparation, 1M rows each
    .venv/bin/python benchmarks/data_scale.py --prepare --quick   # the same at 2,000 rows (plumbing)

The rows (generated first, not timed): one instruction of 3-30 random words, half of them with an input of 3-12
words, an output of 3-20 (1M rows: 264 MB of JSON lines, ~387M byte-level tokens in Alpaca's templates), and a
byte-level BPE tokenizer of 8,192 ids trained on a sample of them. Every measurement is a fresh process on the
machine's cores; one ``HF_DATASETS_CACHE`` per contestant, size and tokenizer, empty for the cold run:

- ``runner``: what ``python -m runner +recipe=instruct_tiny data.path=FILE trainer.max_steps=2 ...
  compile.backend=eager compile.background=disabled`` does (the checks before the run, then the run), with bytes
  and with the BPE tokenizer (``data.tokenizer=DIR``); packed rows of 512, batch 4;
- ``trl``: TRL's ``SFTTrainer`` on the same rows and tokenizer, the way its documentation prepares them: the JSON
  lines through ``datasets.load_dataset``, Alpaca's template by a ``map`` into prompt/completion columns, then
  ``SFTTrainer`` (its tokenizing ``map``, ``dataset_num_proc`` = the cores, completion-only loss, packing with its
  best-fit decreasing to 512), the same Llama-style model (~1M parameters from its configuration), batch 4, 2 steps.
  In a venv of its own (``--trl-python``; made by ``--make-trl-venv``: trl from PyPI beside the local CPU torch).

Time to first step: from the process's start (before its imports) to the first training step's start. Peak
memory: the process's ``ru_maxrss`` and its children's. The warm runs of the smallest size (the reference) and each
larger one alternate, ``--rounds`` times (medians): the ratio of the two is the issue's target (<= 1.2x at 1M rows),
and it is measured side by side, on a machine whose other load the medians only partly remove. Writes
``benchmarks/results/data_scale.json`` (``--out``) and prints a markdown table.

``--prepare`` times the preparation alone (a fresh process and an empty cache each, the table read into Arrow
included), for the three kinds of rows a run tokenizes with its template or chat template: ShareGPT conversations
(``data=instruct``: 1-3 exchanges of a human turn of 3-30 words and a gpt turn of 3-20, a system turn in 3 of 10),
UltraFeedback-shaped preference pairs (``data=preference``: chosen and rejected two-turn conversations sharing the
user's turn) and the Alpaca rows above, the reference; all with the BPE tokenizer and a Llama-3-style chat template
(its header and end-of-turn tokens special). Rows and ids a second, per kind; writes
``benchmarks/results/data_prepare.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "data_scale.json"
PREPARE_OUT = HERE / "results" / "data_prepare.json"
TRL_VENV = ROOT / ".venvs" / "trl"
SIZES = (2_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (300, 1_000)
PREPARE_ROWS, QUICK_PREPARE_ROWS = 1_000_000, 2_000
PREPARE_KINDS = ("chat", "preference", "alpaca")
LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
                   "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
                   "{% endif %}")
"""Llama 3's chat template: each turn's header, its content trimmed, the end of turn (the EOS)."""
SEQ, BATCH, STEPS = 512, 4, 2
ALPACA = ("Below is an instruction that describes a task, paired with an input that provides further context. Write a "
          "response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Input:\n"
          "{input}\n\n### Response:\n")
ALPACA_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                   "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
"""Stanford Alpaca's templates (runner's, runner/data/instruct/formats.py): TRL's contestant renders the same."""
MODEL = {"hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 4, "num_attention_heads": 4}
"""conf/model/hf_causal_lm.yaml's Llama: the model both contestants train."""


# -- the data -----------------------------------------------------------------------------------------------------
def _word_source(seed: int) -> tuple[random.Random, Any]:
    """A random source and ``words(a, b)``: between a and b words of a vocabulary of 4,096 random ones."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(4096)]

    def words(a: int, b: int) -> str:
        return " ".join(rng.choices(vocab, k=rng.randint(a, b)))

    return rng, words


def make_rows(path: Path, rows: int, seed: int = 0) -> Path:
    """``rows`` Alpaca rows of random words (module docstring)."""
    rng, words = _word_source(seed)
    with path.open("w") as f:
        for _ in range(rows):
            f.write(json.dumps({"instruction": words(3, 30), "input": words(3, 12) if rng.random() < 0.5 else "",
                                "output": words(3, 20)}) + "\n")
    return path


def make_chat_rows(path: Path, rows: int, seed: int = 0) -> Path:
    """``rows`` ShareGPT conversations of random words (module docstring)."""
    rng, words = _word_source(seed)
    with path.open("w") as f:
        for _ in range(rows):
            turns = [{"from": "system", "value": words(3, 12)}] if rng.random() < 0.3 else []
            for _ in range(rng.randint(1, 3)):
                turns += [{"from": "human", "value": words(3, 30)}, {"from": "gpt", "value": words(3, 20)}]
            f.write(json.dumps({"conversations": turns}) + "\n")
    return path


def make_preference_rows(path: Path, rows: int, seed: int = 0) -> Path:
    """``rows`` UltraFeedback-shaped pairs of random words: chosen and rejected share the user's turn."""
    _, words = _word_source(seed)
    with path.open("w") as f:
        for _ in range(rows):
            user = {"role": "user", "content": words(3, 30)}
            chosen, rejected = ([user, {"role": "assistant", "content": words(3, 20)}] for _ in range(2))
            f.write(json.dumps({"chosen": chosen, "rejected": rejected}) + "\n")
    return path


def make_tokenizer(directory: Path, rows: Path) -> Path:
    """A byte-level BPE tokenizer of 8,192 ids trained on the first 20,000 rows' text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    with rows.open() as f:
        for _, line in zip(range(20_000), f, strict=False):
            row = json.loads(line)
            texts.append(" ".join((row["instruction"], row["input"], row["output"])))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=8192, special_tokens=["<pad>", "<unk>", "</s>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                            eos_token="</s>").save_pretrained(directory)
    return directory


def make_chat_tokenizer(directory: Path, rows: Path) -> Path:
    """The BPE tokenizer of :func:`make_tokenizer` with Llama 3's chat template and its special tokens (the EOS
    its end of turn)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(make_tokenizer(directory, rows)))
    tok.add_special_tokens({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                            "additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>"]})
    tok.chat_template = LLAMA3_TEMPLATE
    tok.save_pretrained(str(directory))
    return directory


# -- the measured processes (each prints one JSON line) ---------------------------------------------------------------
def _peak_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)


def child_runner(start: float, path: str, tokenizer: str, run_dir: str) -> dict[str, Any]:
    """runner's command line, with a callback that notes the first step: the checks before the run (where the data
    is prepared), then the run."""
    import lightning as L

    from runner.config.composing.loading import compose, load
    from runner.config.composing.precheck import precheck
    from runner.run import run

    argv = ["+recipe=instruct_tiny", f"data.path={path}", f"data.seq_len={SEQ}", f"data.batch_size={BATCH}",
            f"trainer.max_steps={STEPS}", f"trainer.val_check_interval={STEPS}", "trainer.limit_val_batches=1",
            "compile.backend=eager", "compile.background=disabled", "telemetry.speedup_steps=0",
            "trainer.enable_progress_bar=false"]
    if tokenizer:
        from transformers import AutoTokenizer

        argv += [f"data.tokenizer={tokenizer}",
                 f"model.overrides.vocab_size={len(AutoTokenizer.from_pretrained(tokenizer))}"]
    first: list[float] = []

    class FirstStep(L.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            if not first:
                first.append(time.time())

    precheck(argv)
    figures = run(load(compose(argv, run_dir=run_dir)), extra_callbacks=[FirstStep()]).figures
    return {"first_step_s": round(first[0] - start, 2), "total_s": round(time.time() - start, 2),
            "peak_rss_mib": _peak_mib(), "examples": figures.get("data/examples"),
            "padding_pct": figures.get("data/packing_padding_pct"), "rows": figures.get("data/packs")}


def _prompt_completion(row: dict[str, Any]) -> dict[str, Any]:
    """An Alpaca row as TRL's prompt/completion columns, in Alpaca's template (module-level: datasets hashes it)."""
    template = ALPACA if row["input"] else ALPACA_NO_INPUT
    prompt = template.replace("{instruction}", row["instruction"]).replace("{input}", row["input"])
    return {"prompt": prompt, "completion": row["output"]}


def child_trl(start: float, path: str, tokenizer: str, run_dir: str) -> dict[str, Any]:
    """TRL's SFTTrainer on the same rows (module docstring)."""
    import torch
    from datasets import load_dataset
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from transformers.trainer_callback import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    first: list[float] = []

    class FirstStep(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            if not first:
                first.append(time.time())

    procs = os.cpu_count() or 1
    tok = AutoTokenizer.from_pretrained(tokenizer)
    rows = load_dataset("json", data_files=path, split="train")
    rows = rows.map(_prompt_completion, remove_columns=rows.column_names, num_proc=procs if len(rows) >= 50_000
                    else None)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), max_position_embeddings=SEQ, **MODEL))
    args = SFTConfig(output_dir=run_dir, max_length=SEQ, packing=True, per_device_train_batch_size=BATCH,
                     max_steps=STEPS, report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                     dataset_num_proc=procs, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=tok, callbacks=[FirstStep()])
    trainer.train()
    return {"first_step_s": round(first[0] - start, 2), "total_s": round(time.time() - start, 2),
            "peak_rss_mib": _peak_mib(), "examples": len(rows), "rows": len(trainer.train_dataset)}


def child_prepare(start: float, path: str, tokenizer: str, kind: str) -> dict[str, Any]:
    """runner's preparation of one table (the function a run's checks call), timed from before the table is read
    to the store written: its rows and ids a second."""
    from runner.data.instruct.encode import tokenizer_and_render
    from runner.data.instruct.prepare import prepare
    from runner.data.preference.read import prepare_pairs
    from runner.data.tokens.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    began = time.time()
    if kind == "preference":
        _, render = tokenizer_and_render(tokenizer, None, given=tok)
        store = prepare_pairs(path, "data.path", tok, render, "prompt", "chosen", "rejected", None, None, None).store
    else:
        store = prepare(path, "data.path", tok, "prompt", "response", None, None, None, None).store
    seconds = time.time() - began
    ids = sum(len(store.ragged(c).values) for c in (("prompt_ids", "chosen_ids", "rejected_ids") if kind ==
                                                    "preference" else ("ids",)))
    return {"rows": store.rows, "ids": ids, "prepare_s": round(seconds, 2), "tokenizing_s": store.meta["seconds"],
            "processes": store.meta["processes"], "rows_per_s": round(store.rows / seconds),
            "ids_per_s": round(ids / seconds), "peak_rss_mib": _peak_mib(), "total_s": round(time.time() - start, 2)}


def _child(python: str, kind: str, path: Path, tokenizer: str, cache: Path, tmp: Path) -> dict[str, Any]:
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "true"}
    if kind == "runner":
        env["PYTHONPATH"] = str(ROOT)
    run_dir = tempfile.mkdtemp(prefix=f"{kind}-", dir=tmp)
    return _fresh(python, f"child_{kind}(start, {str(path)!r}, {tokenizer!r}, {run_dir!r})", env,
                  f"{kind} on {path.name}")


def _fresh(python: str, call: str, env: dict[str, str], what: str) -> dict[str, Any]:
    """``call`` (a ``child_*`` function of this file and its arguments, ``start`` the process's start) in a fresh
    ``python``: the JSON line it prints."""
    # This file by its path, so the child's sys.path is the repository's, not benchmarks/.
    code = (f"import time; start = time.time(); import importlib.util, json; "
            f"spec = importlib.util.spec_from_file_location('data_scale', {__file__!r}); "
            "d = importlib.util.module_from_spec(spec); spec.loader.exec_module(d); "
            f"print('RESULT ' + json.dumps(d.{call}))")
    proc = subprocess.run([python, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=7200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{what}: {proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1].removeprefix("RESULT ")))


# -- the measurement --------------------------------------------------------------------------------------------------
def measure(sizes: tuple[int, ...], rounds: int, tokenizers: tuple[str, ...], trl_python: str | None,
            scratch: Path) -> dict[str, Any]:
    data = {n: make_rows(scratch / f"alpaca_{n}.jsonl", n) for n in sizes}
    bpe = str(make_tokenizer(scratch / "bpe", data[max(sizes)])) if "bpe" in tokenizers else ""
    contestants = [("runner", sys.executable, tok) for tok in tokenizers]
    if trl_python and "bpe" in tokenizers:
        contestants.append(("trl", trl_python, "bpe"))
    results: dict[str, Any] = {}
    for kind, python, tok in contestants:
        name = f"{kind}, {tok}"
        results[name] = {}
        for n in sizes:
            cache = scratch / "cache" / f"{kind}-{tok}-{n}"
            spec = bpe if tok == "bpe" else ""
            cold = _child(python, kind, data[n], spec, cache, scratch)
            results[name][n] = {"cold": cold, "warm": []}
            print(f"{name}, {n:,} rows, cold: {cold}", flush=True)
        for _ in range(rounds):  # the reference and each size, alternating: side by side
            for n in sizes:
                warm = _child(python, kind, data[n], bpe if tok == "bpe" else "",
                              scratch / "cache" / f"{kind}-{tok}-{n}", scratch)
                results[name][n]["warm"].append(warm)
                print(f"{name}, {n:,} rows, warm: {warm}", flush=True)
        for n in sizes:
            warm = results[name][n]["warm"]
            results[name][n]["warm_first_step_s"] = statistics.median(w["first_step_s"] for w in warm)
            results[name][n]["warm_peak_rss_mib"] = statistics.median(w["peak_rss_mib"] for w in warm)
        reference = results[name][sizes[0]]
        for n in sizes:
            r = results[name][n]
            r["warm_vs_reference_x"] = round(r["warm_first_step_s"] / reference["warm_first_step_s"], 2)
            r["warm_rss_over_reference_mib"] = round(r["warm_peak_rss_mib"] - reference["warm_peak_rss_mib"], 1)
            r["cold_rss_over_reference_mib"] = round(r["cold"]["peak_rss_mib"] - reference["cold"]["peak_rss_mib"], 1)
    return {"results": results, "sizes": list(sizes), "file_mb": {n: round(data[n].stat().st_size / 1e6, 1)
                                                                 for n in sizes}}


def measure_prepare(rows: int, kinds: tuple[str, ...], scratch: Path) -> dict[str, Any]:
    """Each kind's preparation of ``rows`` rows (module docstring), in a fresh process with an empty cache."""
    alpaca = make_rows(scratch / f"alpaca_{rows}.jsonl", rows)
    tokenizer = str(make_chat_tokenizer(scratch / "bpe_chat", alpaca))
    make = {"chat": make_chat_rows, "preference": make_preference_rows}
    results = {}
    for kind in kinds:
        path = alpaca if kind == "alpaca" else make[kind](scratch / f"{kind}_{rows}.jsonl", rows)
        env = {**os.environ, "HF_DATASETS_CACHE": str(scratch / "cache" / kind), "PYTHONPATH": str(ROOT)}
        done = _fresh(sys.executable, f"child_prepare(start, {str(path)!r}, {tokenizer!r}, {kind!r})", env,
                      f"preparing {path.name}")
        results[kind] = {**done, "file_mb": round(path.stat().st_size / 1e6, 1)}
        print(f"{kind}, {rows:,} rows: {results[kind]}", flush=True)
    return {"results": results, "rows": rows}


def render_prepare(result: dict[str, Any]) -> str:
    lines = [f"# benchmarks/data_scale.py --prepare ({result['date']}, {result['machine']})", "",
             f"{result['rows']:,} generated rows of each kind, a BPE tokenizer of 8,192 ids with Llama 3's chat "
             "template; a fresh process, nothing cached: from before the table is read to the store written.", "",
             "| kind | file [MB] | ids | prepare [s] | of it tokenizing [s] | rows/s | ids/s | peak [MiB] |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind, r in result["results"].items():
        lines.append(f"| {kind} | {r['file_mb']} | {r['ids']:,} | {r['prepare_s']} | {r['tokenizing_s']} | "
                     f"{r['rows_per_s']:,} | {r['ids_per_s']:,} | {r['peak_rss_mib']} |")
    return "\n".join(lines)


def render(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    lines = [f"# benchmarks/data_scale.py ({result['date']}, {result['machine']})", "",
             f"Generated Alpaca rows; time from the process's start to the first training step, peak resident memory "
             f"(MiB); warm: the median of {result['args']['rounds']} round(s), alternating with {sizes[0]:,} rows "
             "(the reference).", "",
             "| contestant | rows | cold: first step [s] | cold: peak [MiB] | warm: first step [s] | warm: peak "
             "[MiB] | warm vs reference [x] | warm peak over reference [MiB] |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, by_size in result["results"].items():
        for n in sizes:
            r = by_size[str(n)] if str(n) in by_size else by_size[n]
            lines.append(f"| {name} | {int(n):,} | {r['cold']['first_step_s']} | {r['cold']['peak_rss_mib']} | "
                         f"{r['warm_first_step_s']} | {r['warm_peak_rss_mib']} | {r['warm_vs_reference_x']} | "
                         f"{r['warm_rss_over_reference_mib']} |")
    return "\n".join(lines)


def make_trl_venv(where: Path) -> None:
    """A venv with trl from PyPI beside the local CPU torch (the image's pip configuration supplies it)."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    subprocess.run([str(where / "bin" / "pip"), "install", "-q", "torch==2.13.0", "trl", "transformers==5.24.0",
                    "datasets==5.2.0"], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="300 and 1,000 rows, bytes, one round, no TRL; writes nothing")
    p.add_argument("--prepare", action="store_true", help="time chat, preference and Alpaca preparation instead "
                   f"({PREPARE_ROWS:,} rows each; --quick: {QUICK_PREPARE_ROWS:,})")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="rows (the first is the reference; "
                   "--prepare: the rows of each kind)")
    p.add_argument("--kinds", nargs="+", choices=PREPARE_KINDS, default=list(PREPARE_KINDS),
                   help="--prepare: the kinds of rows prepared")
    p.add_argument("--rounds", type=int, default=None, help="warm rounds (default 3)")
    p.add_argument("--tokenizers", nargs="+", choices=("bytes", "bpe"), default=None)
    p.add_argument("--trl-python", default=None, help=f"the python of a venv with trl (default {TRL_VENV}/bin/python)")
    p.add_argument("--make-trl-venv", action="store_true", help=f"create {TRL_VENV} first")
    p.add_argument("--out", type=Path, default=None, help=f"results file (default {OUT.relative_to(ROOT)})")
    args = p.parse_args(argv)
    if args.make_trl_venv:
        make_trl_venv(TRL_VENV)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    if args.prepare:
        rows = (args.sizes or [QUICK_PREPARE_ROWS if args.quick else PREPARE_ROWS])[0]
        with tempfile.TemporaryDirectory(prefix="bench-data-prepare-") as scratch:
            result = measure_prepare(rows, tuple(args.kinds), Path(scratch))
        result.update(date=datetime.date.today().isoformat(), machine=machine)
        return report(result, render_prepare(result), args.out or (None if args.quick else PREPARE_OUT))
    sizes = tuple(args.sizes or (QUICK_SIZES if args.quick else SIZES))
    rounds = args.rounds or (1 if args.quick else 3)
    tokenizers = tuple(args.tokenizers or (("bytes",) if args.quick else ("bytes", "bpe")))
    trl = args.trl_python or (str(TRL_VENV / "bin" / "python") if (TRL_VENV / "bin" / "python").exists() and
                              not args.quick else None)
    if trl is None and not args.quick:
        print(f"no TRL venv ({TRL_VENV}): TRL is not measured; --make-trl-venv makes one", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-data-scale-") as scratch:
        result = measure(sizes, rounds, tokenizers, trl, Path(scratch))
    result.update(date=datetime.date.today().isoformat(), args={"sizes": list(sizes), "rounds": rounds,
                                                               "tokenizers": list(tokenizers), "trl": bool(trl)},
                  machine=machine)
    return report(result, render(result), args.out or (None if args.quick else OUT))


def report(result: dict[str, Any], text: str, out: Path | None) -> int:
    """Print the table; write the results file (none for --quick unless --out says where)."""
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
