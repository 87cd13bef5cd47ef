"""The three shapes instruction data comes in, and how each row becomes text with its answers marked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from runner.config.errors import close_matches
from runner.data.instruct.chat import (
    ANSWER_ROLE,
    CHAT_COLUMNS,
    SHAPES_HINT,
    Render,
    Segments,
    chat_segments,
    messages_of,
    template_render,
)
from runner.data.reading.sources import DataError, Source
from runner.data.reading.tables import cell_text

# The default prompt of the pair format (``{prompt}``: the prompt column's text)
PAIR_TEMPLATE = "### Instruction:\n{prompt}\n\n### Response:\n"
# Stanford Alpaca's prompt for a row with an input
ALPACA_TEMPLATE = ("Below is an instruction that describes a task, paired with an input that provides further "
                   "context. Write a response that appropriately completes the request.\n\n"
                   "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
# Stanford Alpaca's prompt for a row whose input is empty
ALPACA_NO_INPUT_TEMPLATE = ("Below is an instruction that describes a task. Write a response that appropriately "
                            "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
DEFAULT_COLUMNS = ("prompt", "response")



class Kind(Enum):
    """Which of the three shapes a table is."""

    pair = "pair"
    alpaca = "alpaca"
    chat = "chat"


@dataclass(frozen=True)
class Format:
    """How rows of one table become examples: the shape, its columns, the prompt template."""

    kind: Kind
    columns: tuple[str, ...]  # pair: (prompt, response); alpaca: (instruction, input or "", output); chat: (messages,)
    template: str | None = None  # pair and alpaca: ``data.prompt_template`` (None: the shape's default)
    roles: tuple[tuple[str, str], ...] = ()  # chat: ``data.roles``, each role as written and the role it becomes
    sharegpt: bool = False  # chat: the turns are ShareGPT's ``from``/``value`` (set once the column was read)

    def describe(self) -> str:
        """The shape, for the data section."""
        if self.kind is Kind.chat:
            shape = "ShareGPT from/value" if self.sharegpt else "role/content"
            return f"chat: column {self.columns[0]}, {shape} turns (every assistant turn an answer)"
        if self.kind is Kind.alpaca:
            return "Alpaca: instruction, input, output" + (" (data.prompt_template)" if self.template else "")
        return f"prompt/response: columns {self.columns[0]}, {self.columns[1]}"

    def prompt(self, text: str, context: str = "") -> str:
        """The prompt the model sees for a question ``text`` (Alpaca: the instruction, ``context`` its input)."""
        if self.kind is Kind.alpaca:
            template = self.template or (ALPACA_TEMPLATE if context else ALPACA_NO_INPUT_TEMPLATE)
            return template.replace("{instruction}", text).replace("{input}", context)
        return (self.template or PAIR_TEMPLATE).replace("{prompt}", text)

    def segments(self, row: dict[str, Any], render: Render | None) -> tuple[Segments, list[str]]:
        """One row as ``(text, is_answer)`` pieces, and its answers' own text (a chat's assistant contents: its answer
        pieces carry the template's markup)."""
        if self.kind is Kind.chat:
            assert render is not None, "a chat template (checked before the run)"
            messages = messages_of(row[self.columns[0]], dict(self.roles))
            return chat_segments(messages, render), [m["content"] for m in messages if m["role"] == ANSWER_ROLE]
        if self.kind is Kind.alpaca:
            context = cell_text(row.get(self.columns[1])) if self.columns[1] else ""
            answer = cell_text(row[self.columns[2]])
            return [(self.prompt(cell_text(row[self.columns[0]]), context), False), (answer, True)], [answer]
        answer = cell_text(row[self.columns[1]])
        return [(self.prompt(cell_text(row[self.columns[0]])), False), (answer, True)], [answer]

    @property
    def answer_column(self) -> str:
        return self.columns[0] if self.kind is Kind.chat else self.columns[-1]


def resolve_format(columns: Sequence[str], source: Source, prompt_column: str, response_column: str,
                   messages_column: str | None, prompt_template: str | None,
                   roles: dict[str, str] | None = None) -> Format:
    """The shape of a table with ``columns``; ``DataError`` naming the fix when it has none."""
    names = list(columns)
    mapped = tuple(sorted((str(k), str(v)) for k, v in (roles or {}).items()))
    if messages_column is not None:
        if messages_column not in names:
            raise _missing("data.messages_column", messages_column, names, source)
        return Format(Kind.chat, (messages_column,), roles=mapped)
    asked = (prompt_column, response_column) != DEFAULT_COLUMNS
    if prompt_column in names and response_column in names:
        return Format(Kind.pair, (prompt_column, response_column), _checked(prompt_template, ("{prompt}",)))
    if not asked and "instruction" in names and "output" in names:
        return Format(Kind.alpaca, ("instruction", "input" if "input" in names else "", "output"),
                      _checked(prompt_template, ("{instruction}",)))
    chats = [n for n in CHAT_COLUMNS if n in names]
    if not asked and chats:
        return Format(Kind.chat, (chats[0],), roles=mapped)
    setting, value = ("data.prompt_column", prompt_column) if prompt_column not in names else \
        ("data.response_column", response_column)
    raise _missing(setting, value, names, source)


def _missing(setting: str, value: str, names: list[str], source: Source) -> DataError:
    """A column that is not there: did-you-mean, the table's columns, the other shapes."""
    matches = close_matches(value, names)
    hint = f"Did you mean {setting}={matches[0]}? " if matches else ""
    lists = [n for n in names if n.lower() in ("conversation", "chat", "dialog", "dialogue", "turns")]
    chat = f" If {lists[0]} holds conversations, read it with data.messages_column={lists[0]}." if lists else ""
    return DataError(f"{setting}={value}: {source.key}={source.given} has no column {value}. {hint}Its columns: "
                     f"{', '.join(names) or 'none'}. data=instruct reads a prompt and a response column "
                     "(data.prompt_column, data.response_column), Alpaca's instruction/input/output, or a column of "
                     f"conversations, each {SHAPES_HINT}: data.messages_column=COLUMN, found by itself when the "
                     f"column is named messages or conversations.{chat}")


def _checked(template: str | None, needs: tuple[str, ...]) -> str | None:
    if template is not None and not all(n in template for n in needs):
        raise DataError(f"data.prompt_template={template!r} has no {' or '.join(needs)}: the row's text would not be "
                        f"in the prompt. Put {needs[0]} where it goes (e.g. 'Q: {needs[0]}\\nA: '), or drop "
                        "data.prompt_template for the documented default.")
    return template


def prompt_info(fmt: Format, chat_template: str | None, tokenizer: Any) -> dict[str, Any]:
    """What ``generate`` needs to put a question in the form the model was trained on (``prompt.json``)."""
    if fmt.kind is Kind.chat:
        own = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
        return {"kind": fmt.kind.value, "chat_template": chat_template or own}
    template = fmt.template or (ALPACA_NO_INPUT_TEMPLATE if fmt.kind is Kind.alpaca else PAIR_TEMPLATE)
    return {"kind": fmt.kind.value, "template": template}


def generation_prompt(info: dict[str, Any], text: str, tokenizer: Any) -> str:
    """``text`` as the prompt of the instruction format ``info`` describes: in its template, or as a user turn of its
    chat template with the generation prompt after it."""
    if info.get("kind") == Kind.chat.value:
        render = template_render(tokenizer, info.get("chat_template"))
        assert render is not None, "a chat run has a chat template"
        return render([{"role": "user", "content": text}], True)
    return str(info["template"]).replace("{prompt}", text).replace("{instruction}", text).replace("{input}", "")


def as_chat_template(info: dict[str, Any], bos: bool) -> str:
    """The prompt template of a pair or Alpaca run (``info``) as a Jinja chat template for an export's tokenizer, so
    that ``apply_chat_template(..., add_generation_prompt=True)`` asks the model as the run trained it (``bos``: a BOS
    first, as the run's tokenizer added one)."""
    template = str(info["template"]).replace("{instruction}", "{prompt}").replace("{input}", "")
    before, _, after = template.partition("{prompt}")

    def literal(text: str) -> str:
        return f"{{{{ {json.dumps(text)} }}}}" if text else ""

    return (("{{ bos_token }}" if bos else "") + "{% for m in messages %}{% if m.role == 'user' %}"
             f"{literal(before)}{{{{ m.content }}}}{literal(after)}"
             "{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}")
