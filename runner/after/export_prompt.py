"""An instruction-tuned run's prompt format, carried by its export: ``runner_export.json``'s ``prompt``, the README,
and the tokenizer's chat template (the run's own, or its prompt template written as one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.data.instruct.formats import Kind, as_chat_template, generation_prompt


def chat_template_into(out: Path, info: dict[str, Any]) -> str | None:
    """Give the tokenizer exported in ``out`` the chat template that asks as the run did; the template, or None."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    if info.get("kind") == Kind.chat.value:
        template = info.get("chat_template")
    else:
        ids = tokenizer("a")["input_ids"]
        bos = tokenizer.bos_token_id is not None and bool(ids) and ids[0] == tokenizer.bos_token_id
        template = as_chat_template(info, bos)
    if not template:
        return None
    tokenizer.chat_template = template
    tokenizer.save_pretrained(str(out))
    return str(template)


def readme_lines(info: dict[str, Any], template: str | None) -> list[str]:
    """The export README's section on asking the model as it was trained."""
    example = generation_prompt(info, "QUESTION", None) if info.get("kind") != Kind.chat.value else None
    lines = ["## Asking it as it was trained", ""]
    if example is not None:
        lines += [f"It was trained on {info.get('kind')} data, each question in this prompt (QUESTION where it goes):",
                  "", "```", example, "```", ""]
    else:
        lines += ["It was trained on conversations rendered with the chat template of its tokenizer here.", ""]
    if template is not None:
        lines += ["With transformers: `tokenizer.apply_chat_template([{\"role\": \"user\", \"content\": QUESTION}], "
                  "add_generation_prompt=True)` gives exactly the prompt it was trained on (its tokenizer's chat "
                  "template"
                  + (", written from that prompt)." if example is not None else ")."), ""]
    if info.get("eos_id") is not None:
        lines += [f"Each answer ended with the token id {info['eos_id']} (its EOS): stop there "
                  f"(`generate(..., eos_token_id={info['eos_id']})`). `python -m runner generate DIR --prompt "
                  "QUESTION` does both.", ""]
    return lines
