"""An export answers as the run did (issue 75): ``runner generate`` on an exported folder (a full fine-tune's, a LoRA
adapter's and its merged model) puts the question in the prompt the run trained with, as ``runner generate`` on the
run does, and transformers users get the same prompt from the exported tokenizer's chat template: the same text,
both ways. On a saved Llama of one's own whose tokenizer adds a BOS, with an Alpaca JSON array and chat JSON lines."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.after.cli import main
from runner.data.instruct.formats import ALPACA_NO_INPUT_TEMPLATE
from tests.after_runs import FAST, train
from tests.own_llm import alpaca_array, chat_rows, jsonl, own_llm

QUESTION = "What colour is cherry?"
NEW = 8


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A LoRA run on Alpaca rows and a full fine-tune on conversations, each with its exports."""
    root = tmp_path_factory.mktemp("asks")
    llm = own_llm(root / "llm")
    common = ["model=hf_causal_lm", f"model.path={llm}", "data=instruct", "data.seq_len=256", "data.batch_size=8",
              "compile=eager", "optimizer.lr=3e-3", *FAST, "trainer.max_steps=6", "trainer.val_check_interval=6"]
    lora = train(root / "lora", [*common, f"data.path={alpaca_array(root / 'alpaca.json')}", "peft=lora"]).run_dir
    chat = train(root / "chat", [*common, f"data.path={jsonl(root / 'chat.jsonl', chat_rows(24))}"]).run_dir
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["export", str(lora), "--merge", "--out", str(root / "merged")]) == 0
    return {"lora": lora, "adapter": lora / "model", "merged": root / "merged", "chat": chat, "full": chat / "model"}


def generate(directory: Path) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["generate", str(directory), "--prompt", QUESTION, "--temperature", "0",
                     "--max-new-tokens", str(NEW)]) == 0
    return out.getvalue().removesuffix("\n")  # print's newline only: an empty answer leaves the prompt's own


def transformers_text(export: Path) -> str:
    """What transformers users get: the exported tokenizer's chat template (the prompt's ids, its BOS where the run's
    had one), the model (or base + adapter), greedy, stopped at the EOS the export names; the prompt and the answer
    as text."""
    import peft
    from transformers import AutoModelForCausalLM, AutoTokenizer

    meta: dict[str, Any] = json.loads((export / "runner_export.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(str(export))
    messages = [{"role": "user", "content": QUESTION}]
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True,
                                        return_tensors="pt")["input_ids"]
    if meta.get("adapter"):
        base = AutoModelForCausalLM.from_pretrained(meta["adapter"]["base"])
        model = peft.PeftModel.from_pretrained(base, str(export))
    else:
        model = AutoModelForCausalLM.from_pretrained(str(export))
    out = model.eval().generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                                do_sample=False, eos_token_id=meta["prompt"]["eos_id"], pad_token_id=0)
    parts = (ids[0], out[0, ids.shape[1]:])  # the prompt and the answer
    return "".join(tokenizer.decode(part.tolist(), skip_special_tokens=True) for part in parts)


@pytest.mark.parametrize(("run", "exports"), [("lora", ("adapter", "merged")), ("chat", ("full",))])
def test_an_export_answers_as_the_run_did_in_runner_and_in_transformers(runs: dict[str, Path], run: str,
                                                                        exports: tuple[str, ...]) -> None:
    expected = generate(runs[run])
    prompt = (ALPACA_NO_INPUT_TEMPLATE.replace("{instruction}", QUESTION) if run == "lora" else
              "<|user|>\n" + QUESTION + "<|assistant|>\n")  # CHAT_TEMPLATE as Jinja renders it (trim_blocks)
    assert expected.startswith(prompt), expected  # the run asks in its own format
    for name in exports:
        export = runs[name]
        assert generate(export) == expected, name
        assert transformers_text(export) == expected, name
        meta = json.loads((export / "runner_export.json").read_text())
        assert meta["prompt"]["kind"] == ("alpaca" if run == "lora" else "chat")
        readme = (export / "README.md").read_text()
        assert "## Asking it as it was trained" in readme and "apply_chat_template" in readme
        if run == "lora":
            assert "### Instruction:\nQUESTION\n\n### Response:" in readme


def test_greedy_generation_gives_transformers_no_sampling_flag_to_warn_about(runs: dict[str, Path]) -> None:
    """Issue 75: transformers warned about ``top_k`` on every greedy ``runner generate``: greedy decoding reads neither
    top-k nor the temperature, and runner no longer passes them."""
    import logging

    class Kept(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.said: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.said.append(record.getMessage())

    kept, transformers_log = Kept(), logging.getLogger("transformers")  # its own handler: it does not propagate
    logging.Logger.warning_once.cache_clear()  # type: ignore[attr-defined]  # transformers says it once a process
    transformers_log.addHandler(kept)
    try:
        generate(runs["merged"])
    finally:
        transformers_log.removeHandler(kept)
    assert not [m for m in kept.said if "generation flags are not valid" in m], kept.said
