"""What a new user brings (issue 75): a Llama-style model of their own saved with ``save_pretrained``, its own small
byte-level BPE tokenizer with a chat template, an Alpaca JSON array, chat JSON lines and ShareGPT conversations,
all written into a directory the test gives. No tests here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.hf_models import save_model

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% if m.role == 'assistant' %}"
                 "{{ eos_token }}{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
"""A template that renders any role (as many do), each assistant turn ended by the EOS."""
COLOURS = {"cherry": "red", "sky": "blue", "grass": "green", "snow": "white", "coal": "black", "lemon": "yellow"}


def own_llm(directory: Path, hidden_size: int = 64, vocab_size: int = 512) -> Path:
    """A tiny Llama (``hidden_size``) and its ``vocab_size``-id BPE tokenizer with :data:`CHAT_TEMPLATE`, saved in
    ``directory`` as ``save_pretrained`` writes them. The tokenizer puts its BOS before a text, as Llama's does."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    save_model(directory, hidden_size=hidden_size, vocab_size=vocab_size, max_positions=256)
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tokenizer.bos_token_id)])
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(directory))
    return directory


def questions(n: int) -> list[tuple[str, str]]:
    """``n`` questions and answers a tiny model learns in a few dozen steps (the colour of a thing)."""
    things = list(COLOURS.items())
    return [(f"What colour is {things[i % len(things)][0]}?", things[i % len(things)][1]) for i in range(n)]


def alpaca_array(path: Path, n: int = 48) -> Path:
    """Alpaca rows (instruction, input, output) as one JSON array, as Stanford Alpaca's file is."""
    rows = [{"instruction": q, "input": "", "output": a} for q, a in questions(n)]
    path.write_text(json.dumps(rows, indent=1))
    return path


def chat_rows(n: int = 20, second_role: str = "assistant") -> list[dict[str, Any]]:
    """Two-turn conversations (``messages`` of {role, content}); the second answer's role is ``second_role``."""
    out = []
    for q, a in questions(n):
        out.append({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a},
                                 {"role": "user", "content": "Are you sure?"},
                                 {"role": second_role, "content": f"Yes, {a}."}]})
    return out


def sharegpt_rows(n: int = 20) -> list[dict[str, Any]]:
    """The same conversations in ShareGPT's shape: ``conversations`` of {from, value}, with a system turn."""
    out = []
    for q, a in questions(n):
        out.append({"conversations": [{"from": "system", "value": "Answer with a colour."},
                                      {"from": "human", "value": q}, {"from": "gpt", "value": a},
                                      {"from": "human", "value": "Are you sure?"},
                                      {"from": "gpt", "value": f"Yes, {a}."}]})
    return out


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as JSON lines."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
