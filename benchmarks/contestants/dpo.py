"""One contestant of ``dpo.py``, as its own program: LoRA-DPO on the shipped preference pairs with runner, or with
TRL's ``DPOTrainer`` + peft, run by the Python of that tool's virtual environment (TRL's has neither runner nor
Lightning; this program imports them only for runner's contestant).

    python benchmarks/contestants/dpo.py '{"tool": "trl", ...}'     # started by dpo.py, which speaks to it

It trains the spec's model on the spec's pairs and takes turns with the driver (``contestants.pacer.Pacer``) over a
pipe: it writes a JSON line to its standard output when its turn is over (everything else anything prints goes to
standard error) and reads the next turn's number of steps from its standard input; at the end one more line holds
its step times and what it measured: pairs per step, graphs, recompiles (all, and after its warm-up), graph
breaks, peak memory (resident set).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a program (dpo.py): benchmarks/ on sys.path in place of this folder, as for the
    sys.path[0] = str(BENCHMARKS)  # scripts there

from contestants.pacer import Pacer  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@contextlib.contextmanager
def environment_packages() -> Iterator[None]:
    """Imports from the environment, not from benchmarks/ (a process with benchmarks/ on its path imports TRL, which
    imports ``peft``: ``gpu_workloads/child.py``)."""
    saved = list(sys.path)
    local = sys.modules.get("peft")
    if local is not None and Path(getattr(local, "__file__", None) or ".").resolve().parent == BENCHMARKS:
        del sys.modules["peft"]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCHMARKS]
    try:
        yield
    finally:
        sys.path[:] = saved


class LineConn:
    """``Pacer``'s pipe to the driver, as lines: a JSON line out when a turn is over, a number of steps in."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def send(self, message: tuple[str, Any]) -> None:
        self.out.write(json.dumps({"kind": message[0], "payload": message[1]}) + "\n")
        self.out.flush()

    def recv(self) -> int:
        line = sys.stdin.readline()
        if not line:
            raise SystemExit("the driver went away")
        return int(line)


class Compiles:
    """What Dynamo compiled in this process, and how much of it after the warm-up (torch's own counters: TRL's
    environment has no runner to ask)."""

    def __init__(self, warmup: int) -> None:
        import torch._dynamo.utils as du

        du.set_compilation_metrics_limit(10_000)
        self.warmup, self.steps, self.at_warmup = warmup, 0, 0

    @staticmethod
    def _records() -> list[Any]:
        import torch._dynamo.utils as du

        return list(du.get_compilation_metrics())

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.warmup + 1:
            self.at_warmup = sum(1 for m in self._records() if m.recompile_reason)

    def figures(self) -> dict[str, Any]:
        import torch._dynamo.utils as du

        records = self._records()
        recompiles = sum(1 for m in records if m.recompile_reason)
        return {"graphs": int(du.counters["stats"]["unique_graphs"]), "frame_compiles": len(records),
                "recompiles": recompiles, "recompiles_after_warmup": recompiles - self.at_warmup,
                "graph_breaks": int(sum(du.counters["graph_break"].values())),
                "peak_gib": round(peak_gib(), 3)}


def peak_gib() -> float:
    """The peak of the device's allocated memory on CUDA, else the process's resident set (Linux: KiB)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def llama_config(spec: dict[str, Any], vocab: int) -> Any:
    from transformers import LlamaConfig

    s = spec["size"]
    return LlamaConfig(vocab_size=vocab, hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                       num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["heads"],
                       max_position_embeddings=2 * spec["seq_len"], pad_token_id=0, attn_implementation="sdpa")


def run_trl(spec: dict[str, Any], pacer: Pacer, compiles: Compiles) -> dict[str, Any]:
    """TRL's ``DPOTrainer`` with a peft ``LoraConfig`` (the reference: the policy with its adapter disabled), set to
    runner's settings where TRL's defaults differ (float32, a constant learning rate; gradient checkpointing off
    unless ``spec["gradient_checkpointing"]``, TRL's default).

    ``compile``: ``"trainer"`` is TRL's own ``torch_compile=True`` (the Trainer wraps the model in
    ``torch.compile``); ``"in_place"`` compiles the model in place (``nn.Module.compile``) before peft wraps it, so
    the policy and the reference (the adapter disabled by peft's Python flag) run through the same compiled
    forward, as ``torch_compile`` would. TRL 1.13.0 with peft crashes at its first step under ``"trainer"``: its
    reference branch asks ``is_peft_model`` of the compiled wrapper, gets False, and calls ``ref_model``, None."""
    import torch

    with environment_packages():  # transformers imports peft too
        from datasets import Dataset
        from peft import LoraConfig
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from trl import DPOConfig, DPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    torch.manual_seed(spec["seed"])
    model = AutoModelForCausalLM.from_config(llama_config(spec, len(tokenizer)))
    if spec["compile"] == "in_place":
        model.compile(backend=spec["backend"])
    rows = [json.loads(line) for line in Path(spec["pairs"]).read_text().splitlines()]
    rows = [{**rows[i], "prompt": spec["template"].replace("{prompt}", rows[i]["prompt"])} for i in spec["rows"]]

    class Tick(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            compiles.step()
            pacer.tick()

    args = DPOConfig(output_dir=spec["scratch"], per_device_train_batch_size=spec["batch"], max_steps=spec["steps"],
                     learning_rate=spec["lr"], weight_decay=spec["weight_decay"], lr_scheduler_type="constant",
                     beta=spec["beta"], max_length=spec["seq_len"] + 1, bf16=spec.get("bf16", False),
                     gradient_checkpointing=spec.get("gradient_checkpointing", False),
                     torch_compile=spec["compile"] == "trainer",
                     use_cpu=spec.get("device", "cpu") == "cpu",
                     # A backend given turns torch_compile on (TrainingArguments' rule): only with it.
                     **({"torch_compile_backend": spec["backend"]} if spec["compile"] == "trainer" else {}),
                     report_to="none", save_strategy="no", eval_strategy="no", logging_steps=10**6,
                     dataloader_num_workers=0, seed=spec["seed"], disable_tqdm=True)
    lora = LoraConfig(r=spec["rank"], lora_alpha=2 * spec["rank"], lora_dropout=0.0, target_modules=TARGETS,
                      task_type="CAUSAL_LM")
    trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=lora, callbacks=[Tick()])
    trainer.train()
    return {"pairs_per_step": float(spec["batch"]), "optim": args.optim}


def run_runner(spec: dict[str, Any], pacer: Pacer, compiles: Compiles) -> dict[str, Any]:
    """runner: ``PreferenceModule`` (DPO, the reference through the adapter's gate) under ``CompileStrategy``
    (``compile.scope``: step, or none for eager steps; optimizer=auto), packed pairs or pairs padded per batch."""
    from functools import partial

    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback

    from runner.config.schema import Background, CompileConfig, OptimizerPolicy, Scope
    from runner.config.schema.objective import Loss, ObjectiveConfig
    from runner.config.schema.peft import PeftConfig, PeftMethod
    from runner.data.preference import PreferenceDataModule
    from runner.models.hf import CausalLM
    from runner.peft import apply_peft
    from runner.strategy import CompileStrategy
    from runner.training.preference import PreferenceModule
    from runner.training.reference import AdapterReference

    s = spec["size"]
    data = PreferenceDataModule(spec["pairs"], tokenizer=spec["tokenizer"], seq_len=spec["seq_len"],
                                batch_size=spec["rows_per_batch"] if spec["packing"] else spec["batch"],
                                packing=spec["packing"], seed=0)
    data.setup()
    torch.manual_seed(spec["seed"])
    overrides = {"vocab_size": spec["vocab"], "hidden_size": s["hidden"], "intermediate_size": s["intermediate"],
                 "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
                 "num_key_value_heads": s["heads"], "max_position_embeddings": 2 * spec["seq_len"]}
    model = CausalLM("llama", overrides=overrides)
    apply_peft(model, PeftConfig(method=PeftMethod.lora, r=spec["rank"], alpha=2 * spec["rank"],
                                 target_modules=TARGETS))
    objective = ObjectiveConfig(loss=Loss.dpo, beta=spec["beta"])
    module = PreferenceModule(model, partial(torch.optim.AdamW, lr=spec["lr"], weight_decay=spec["weight_decay"]),
                              objective, AdapterReference(model))
    pairs: list[float] = []

    class Tick(Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            compiles.step()
            pacer.tick()
            pairs.append(float(batch[0].pairs.sum()))

    cfg = CompileConfig(scope=Scope(spec.get("scope", "step")), backend=spec["backend"],
                        optimizer=OptimizerPolicy.auto, background=Background.disabled)
    device = spec.get("device", "cpu")
    trainer = L.Trainer(accelerator="gpu" if device == "cuda" else "cpu", devices=1,
                        strategy=CompileStrategy(compile=cfg, device="cuda:0" if device == "cuda" else "cpu"),
                        precision="bf16-mixed" if spec.get("bf16") else "32-true",
                        max_steps=spec["steps"], limit_val_batches=0, num_sanity_val_steps=0,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        logger=False, callbacks=[Tick()])
    trainer.fit(module, datamodule=data)
    return {"pairs_per_step": sum(pairs) / max(len(pairs), 1),
            "padding_pct": data.figures().get("data/packing_padding_pct")}


def main() -> None:
    spec = json.loads(sys.argv[1])
    # benchmarks/lora_qlora.py (a benchmark) would shadow HF's peft: the rest is imported from the environment.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCHMARKS]
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the tools print goes to standard error: standard output is the driver's
    sys.stdout = sys.stderr
    conn = LineConn(proto)
    try:
        pacer = Pacer(conn=None if spec.get("alone") else conn)  # alone: steps without turns (a check)
        compiles = Compiles(spec["warmup"])
        own = (run_trl if spec["tool"] == "trl" else run_runner)(spec, pacer, compiles)
        result = {"times": pacer.times, "hook_times": [0.0] * len(pacer.times), "eval_loss": float("nan"),
                  "measured": {**compiles.figures(), **own}}
        conn.send(("result", result))
    except BaseException:  # the driver reports it, with this traceback
        conn.send(("error", traceback.format_exc()))


if __name__ == "__main__":
    main()
