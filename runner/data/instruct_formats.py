"""The three shapes instruction data comes in, and how each row becomes text with its answers marked.

- **pair**: a prompt column and a response column (``data.prompt_column``, ``data.response_column``); the prompt
  is put in ``data.prompt_template`` (default :data:`PAIR_TEMPLATE`);
- **alpaca**: Alpaca's ``instruction``, ``input`` (may be empty or absent) and ``output``, recognised when the table
  has them and not the prompt/response columns; Stanford Alpaca's own templates (:data:`ALPACA_TEMPLATE`, and
  :data:`ALPACA_NO_INPUT_TEMPLATE` for rows whose input is empty);
- **chat**: a column of conversations (``data.messages_column``): lists of ``{"role", "content"}`` (a CSV cell
  holds the list as JSON), rendered with the tokenizer's chat template or ``data.chat_template``. Every assistant
  turn is an answer.

A row becomes ``segments``: ``(text, is_answer)`` pieces whose concatenation is the whole rendered example. The
encoder (:mod:`runner.data.instruct_encode`) tokenizes each piece on its own, so a prompt's ids are the ids
``generate`` gives the same prompt, and puts an EOS after every answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from runner.config.errors import close_matches
from runner.data.sources import DataError, Source

PAIR_TEMPLATE = "### Instruction:\n{prompt}\n\n### Response:\n"
"""The default prompt of the pair format (``{prompt}``: the prompt column's text)."""
ALPACA_TEMPLATE = ("Below is an instruction that describes a task, paired with an input that provides further "
                   "context. Write a response that appropriately completes the request.\n\n"
                   "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
"""Stanford Alpaca's prompt for a row with an input."""
ALPACA_NO_INPUT_TEMPLATE = ("Below is an instruction that describes a task. Write a response that appropriately "
                            "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
"""Stanford Alpaca's prompt for a row whose input is empty."""
ALPACA_COLUMNS = ("instruction", "input", "output")
DEFAULT_COLUMNS = ("prompt", "response")

Segments = list[tuple[str, bool]]
Render = Callable[[list[dict[str, str]], bool], str]
"""A chat template: ``(messages, add_generation_prompt) -> text``."""


class Kind(Enum):
    """Which of the three shapes a table is."""

    pair = "pair"
    alpaca = "alpaca"
    chat = "chat"


@dataclass(frozen=True)
class Format:
    """How rows of one table become examples: the shape, its columns, the prompt template."""

    kind: Kind
    columns: tuple[str, ...]
    """pair: (prompt, response); alpaca: (instruction, input or "", output); chat: (messages,)."""
    template: str | None = None
    """pair and alpaca: ``data.prompt_template`` (None: the shape's default)."""

    def describe(self) -> str:
        """The shape, for the data section."""
        if self.kind is Kind.chat:
            return f"chat: column {self.columns[0]} (every assistant turn an answer)"
        if self.kind is Kind.alpaca:
            return "Alpaca: instruction, input, output" + (" (data.prompt_template)" if self.template else "")
        return f"prompt/response: columns {self.columns[0]}, {self.columns[1]}"

    def prompt(self, text: str, context: str = "") -> str:
        """The prompt the model sees for a question ``text`` (Alpaca: the instruction, ``context`` its input)."""
        if self.kind is Kind.alpaca:
            template = self.template or (ALPACA_TEMPLATE if context else ALPACA_NO_INPUT_TEMPLATE)
            return template.replace("{instruction}", text).replace("{input}", context)
        return (self.template or PAIR_TEMPLATE).replace("{prompt}", text)

    def segments(self, row: dict[str, Any], render: Render | None) -> Segments:
        """One row as ``(text, is_answer)`` pieces (module docstring)."""
        if self.kind is Kind.chat:
            assert render is not None, "a chat template (checked before the run)"
            return chat_segments(messages_of(row[self.columns[0]]), render)
        if self.kind is Kind.alpaca:
            context = _cell(row.get(self.columns[1])) if self.columns[1] else ""
            return [(self.prompt(_cell(row[self.columns[0]]), context), False), (_cell(row[self.columns[2]]), True)]
        return [(self.prompt(_cell(row[self.columns[0]])), False), (_cell(row[self.columns[1]]), True)]

    @property
    def answer_column(self) -> str:
        return self.columns[0] if self.kind is Kind.chat else self.columns[-1]


def _cell(value: Any) -> str:
    return "" if value is None else value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def resolve_format(columns: Sequence[str], source: Source, prompt_column: str, response_column: str,
                   messages_column: str | None, prompt_template: str | None) -> Format:
    """The shape of a table with ``columns`` (module docstring); :class:`DataError` naming the fix when it has none."""
    names = list(columns)
    if messages_column is not None:
        if messages_column not in names:
            raise _missing("data.messages_column", messages_column, names, source)
        return Format(Kind.chat, (messages_column,))
    asked = (prompt_column, response_column) != DEFAULT_COLUMNS
    if prompt_column in names and response_column in names:
        return Format(Kind.pair, (prompt_column, response_column), _checked(prompt_template, ("{prompt}",)))
    if not asked and "instruction" in names and "output" in names:
        return Format(Kind.alpaca, ("instruction", "input" if "input" in names else "", "output"),
                      _checked(prompt_template, ("{instruction}",)))
    setting, value = ("data.prompt_column", prompt_column) if prompt_column not in names else \
        ("data.response_column", response_column)
    raise _missing(setting, value, names, source)


def _missing(setting: str, value: str, names: list[str], source: Source) -> DataError:
    """A column that is not there: did-you-mean, the table's columns, the other shapes."""
    matches = close_matches(value, names)
    hint = f"Did you mean {setting}={matches[0]}? " if matches else ""
    lists = [n for n in names if n.lower() in ("messages", "conversations", "conversation", "chat")]
    chat = f" A column of conversations is read with data.messages_column={lists[0]}." if lists else ""
    return DataError(f"{setting}={value}: {source.key}={source.given} has no column {value}. {hint}Its columns: "
                     f"{', '.join(names) or 'none'}. data=instruct reads a prompt and a response column "
                     "(data.prompt_column, data.response_column), Alpaca's instruction/input/output, or "
                     f"conversations (data.messages_column).{chat}")


def _checked(template: str | None, needs: tuple[str, ...]) -> str | None:
    if template is not None and not all(n in template for n in needs):
        raise DataError(f"data.prompt_template={template!r} has no {' or '.join(needs)}: the row's text would not be "
                        f"in the prompt. Put {needs[0]} where it goes (e.g. 'Q: {needs[0]}\\nA: '), or drop "
                        "data.prompt_template for the documented default.")
    return template


def messages_of(cell: Any) -> list[dict[str, str]]:
    """A conversation cell as a list of ``{"role", "content"}`` (a JSON string is parsed)."""
    value = json.loads(cell) if isinstance(cell, str) else cell
    if not isinstance(value, list) or not all(isinstance(m, dict) and "role" in m and "content" in m
                                              for m in value):
        raise ValueError("not a list of {role, content} messages")
    return [{"role": str(m["role"]), "content": _cell(m["content"])} for m in value]


def chat_segments(messages: list[dict[str, str]], render: Render) -> Segments:
    """A conversation as pieces: each assistant turn's text as the template renders it (its end-of-turn marker
    included) is an answer. Found by rendering the conversation up to each assistant turn with the generation
    prompt, then with the turn: what the turn adds is the answer. A template that renders earlier turns
    differently once a later one follows cannot be split this way (``ValueError``)."""
    full = render(messages, False)
    cuts: list[tuple[int, int]] = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before, through = render(messages[:i], True), render(messages[:i + 1], False)
        if not (through.startswith(before) and full.startswith(through)):
            raise ValueError(f"the chat template renders the turns before assistant turn {i} differently once "
                             "that turn follows")
        cuts.append((len(before), len(through)))
    if not cuts:
        raise ValueError("no assistant turn")
    out: Segments = []
    at = 0
    for start, end in cuts:
        if start > at:
            out.append((full[at:start], False))
        out.append((full[start:end], True))
        at = end
    if at < len(full):
        out.append((full[at:], False))
    return out


def template_render(tokenizer: Any, chat_template: str | None) -> Render | None:
    """``(messages, add_generation_prompt) -> text`` for a saved tokenizer (its own chat template, or
    ``chat_template``), or, with bytes (``tokenizer`` None), ``chat_template`` alone; None when there is none."""
    if tokenizer is not None and (chat_template or getattr(tokenizer, "chat_template", None)):
        def with_tokenizer(messages: list[dict[str, str]], generation: bool) -> str:
            return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation,
                                                     chat_template=chat_template))
        return with_tokenizer
    if tokenizer is None and chat_template:
        from transformers.utils.chat_template_utils import render_jinja_template

        def alone(messages: list[dict[str, str]], generation: bool) -> str:
            rendered: Any = render_jinja_template([messages], chat_template=chat_template,  # (texts, indices)
                                                  add_generation_prompt=generation, bos_token="", eos_token="")
            return str(rendered[0][0])
        return alone
    return None


def prompt_info(fmt: Format, chat_template: str | None, tokenizer: Any) -> dict[str, Any]:
    """What ``generate`` needs to put a question in the form the model was trained on (``prompt.json``)."""
    if fmt.kind is Kind.chat:
        own = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
        return {"kind": fmt.kind.value, "chat_template": chat_template or own}
    template = fmt.template or (ALPACA_NO_INPUT_TEMPLATE if fmt.kind is Kind.alpaca else PAIR_TEMPLATE)
    return {"kind": fmt.kind.value, "template": template}


def generation_prompt(info: dict[str, Any], text: str, tokenizer: Any) -> str:
    """``text`` as the prompt of the instruction format ``info`` (:func:`prompt_info`) describes: in its template,
    or as a user turn of its chat template with the generation prompt after it."""
    if info.get("kind") == Kind.chat.value:
        render = template_render(tokenizer, info.get("chat_template"))
        assert render is not None, "a chat run has a chat template"
        return render([{"role": "user", "content": text}], True)
    return str(info["template"]).replace("{prompt}", text).replace("{instruction}", text).replace("{input}", "")
