"""The four shapes preference data comes in (TRL ``DPOTrainer``'s), told apart by the columns and the first row: a
prompt column beside chosen and rejected texts or conversations, or none (UltraFeedback's conversations, Anthropic HH's
texts: the prompt is what chosen and rejected share from the start); each row becomes a prompt and two completions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from runner.config.errors import close_matches
from runner.data.instruct.chat import SHAPES_HINT, RoleError
from runner.data.instruct.formats import PAIR_TEMPLATE, Render, messages_of
from runner.data.reading.sources import DataError, Source
from runner.data.reading.tables import cell_text, row_places

DEFAULT_PROMPT = "prompt"
NOTED = 5  # Rows a problem's message names
# The problem of a pair whose two completions are the same: left out and counted, never trained on
IDENTICAL = "chosen identical to rejected"


class EmptyCompletion(ValueError):
    """A row whose chosen (``chosen`` True) or rejected completion holds no text: a pair that would teach the model to
    prefer, or avoid, saying nothing."""

    def __init__(self, chosen: bool) -> None:
        super().__init__(f"an empty {'chosen' if chosen else 'rejected'} completion")
        self.chosen = chosen


def blank(value: Any) -> bool:
    """Whether a cell holds no text: missing, or a string of whitespace."""
    return value is None or isinstance(value, (str, bytes)) and not value.strip()


def _blank_turn(messages: list[dict[str, str]]) -> bool:
    """Whether a completion's messages hold a turn of no text (instruction data refuses such an answer too)."""
    return any(not m["content"].strip() for m in messages)


def _refuse_empty(chosen: bool, rejected: bool) -> None:
    """``EmptyCompletion`` for the first side that is empty."""
    if chosen or rejected:
        raise EmptyCompletion(chosen)


class Shape(Enum):
    """Which of the four shapes a table is."""

    text = "text"
    chat = "chat"
    implicit_chat = "implicit_chat"
    implicit_text = "implicit_text"

    @property
    def conversational(self) -> bool:
        return self in (Shape.chat, Shape.implicit_chat)


@dataclass(frozen=True)
class Texts:
    """One pair as text: the prompt the model reads, each completion after it."""

    prompt: str
    chosen: str
    rejected: str


@dataclass(frozen=True)
class PairFormat:
    """How rows of one table become pairs: the shape, its columns, the prompt template."""

    shape: Shape
    prompt_column: str | None  # None: an implicit prompt
    chosen_column: str
    rejected_column: str
    template: str | None = None  # Explicit text: ``data.prompt_template`` (None: the instruction data's default)
    # Conversations: ``data.roles``, each role as written and the role it becomes
    roles: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """The shape, for the data section."""
        pair = f"{self.chosen_column}/{self.rejected_column}"
        return {Shape.text: f"preference pairs: columns {self.prompt_column}, {pair}",
                Shape.chat: f"preference conversations: columns {self.prompt_column}, {pair} (chat template)",
                Shape.implicit_chat: f"preference conversations: columns {pair}, the prompt their shared turns "
                                     "(chat template)",
                Shape.implicit_text: f"preference texts: columns {pair}, the prompt their shared start"}[self.shape]

    def texts(self, row: dict[str, Any], render: Render | None) -> Texts:
        """One row as a prompt and two completions; ``ValueError`` names what is wrong."""
        chosen, rejected = row[self.chosen_column], row[self.rejected_column]
        _refuse_empty(blank(chosen), blank(rejected))
        if self.shape is Shape.text:
            prompt = cell_text(row[self.prompt_column])  # type: ignore[index]
            return Texts((self.template or PAIR_TEMPLATE).replace("{prompt}", prompt), cell_text(chosen),
                         cell_text(rejected))
        if self.shape is Shape.implicit_text:
            pair = split_text(cell_text(chosen), cell_text(rejected))
            _refuse_empty(blank(pair.chosen), blank(pair.rejected))  # one text the other's start: nothing after it
            return pair
        assert render is not None, "a chat template (checked before the run)"
        roles = dict(self.roles)
        if self.shape is Shape.chat:
            prompt_messages = messages_of(row[self.prompt_column], roles)  # type: ignore[index]
            chosen_messages, rejected_messages = messages_of(chosen, roles), messages_of(rejected, roles)
        else:
            prompt_messages, chosen_messages, rejected_messages = split_messages(messages_of(chosen, roles),
                                                                                  messages_of(rejected, roles))
        if chosen_messages and rejected_messages:  # no message at all: render_pair says so
            _refuse_empty(_blank_turn(chosen_messages), _blank_turn(rejected_messages))
        return render_pair(prompt_messages, chosen_messages, rejected_messages, render)


def split_text(chosen: str, rejected: str) -> Texts:
    """The text chosen and rejected share from the start as the prompt (TRL's ``extract_prompt``: a space just before
    the first difference goes with the completions)."""
    limit, n = min(len(chosen), len(rejected)), 0
    while n < limit and chosen[n] == rejected[n]:
        n += 1
    if 0 < n < limit and chosen[n - 1] == " ":
        n -= 1
    if n == 0:
        raise ValueError("chosen and rejected share no start to be the prompt")
    return Texts(chosen[:n], chosen[n:], rejected[n:])


def split_messages(chosen: list[dict[str, str]], rejected: list[dict[str, str]]) -> tuple[
        list[dict[str, str]], list[dict[str, str]], list[dict[str, str]]]:
    """The messages chosen and rejected share from the start (the prompt), and what follows in each."""
    n = 0
    while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
        n += 1
    if n == 0:
        raise ValueError("chosen and rejected share no first message to be the prompt")
    return chosen[:n], chosen[n:], rejected[n:]


def render_pair(prompt: list[dict[str, str]], chosen: list[dict[str, str]], rejected: list[dict[str, str]],
                render: Render) -> Texts:
    """The prompt's messages rendered with the generation prompt, each completion as what its messages add."""
    if not chosen or not rejected:
        raise ValueError("no completion: chosen or rejected holds no message after the prompt")
    before = render(prompt, True)
    out = []
    for completion in (chosen, rejected):
        full = render(prompt + completion, False)
        if not full.startswith(before):
            raise ValueError("the chat template renders the prompt differently once a completion follows")
        out.append(full[len(before):])
    return Texts(before, out[0], out[1])


def _is_conversation(cell: Any) -> bool:
    try:
        messages_of(cell)
    except RoleError:  # a conversation with a role nothing maps: refused with its place by the reading
        return True
    except (ValueError, TypeError):
        return False
    return True


def resolve_shape(columns: Sequence[str], first: dict[str, Any], source: Source, prompt_column: str,
                  chosen_column: str, rejected_column: str, prompt_template: str | None,
                  roles: dict[str, str] | None = None) -> PairFormat:
    """The shape of a table with ``columns`` whose first row is ``first``; ``DataError`` naming the fix when it has
    none."""
    names = list(columns)
    for setting, value in (("data.chosen_column", chosen_column), ("data.rejected_column", rejected_column)):
        if value not in names:
            raise missing_column(setting, value, names, source)
    has_prompt = prompt_column in names
    if not has_prompt and prompt_column != DEFAULT_PROMPT:
        raise missing_column("data.prompt_column", prompt_column, names, source)
    chat = _is_conversation(first[chosen_column])
    columns = [*([prompt_column] if has_prompt else []), chosen_column, rejected_column]
    if len({_is_conversation(first[c]) for c in columns if first[c] is not None}) > 1:  # no prompt: see no_prompt
        raise DataError(f"{source.key}={source.given}: its first row mixes texts and conversations across "
                        f"{', '.join(columns)}: the prompt, chosen and rejected are all texts, or all conversations "
                        f"({SHAPES_HINT}). Convert the columns to one form.")
    if prompt_template is not None and "{prompt}" not in prompt_template:
        raise DataError(f"data.prompt_template={prompt_template!r} has no {{prompt}}: the row's prompt would not be in "
                        "the text the model reads. Put {prompt} where it goes (e.g. 'Q: {prompt}\\nA: '), or drop "
                        "data.prompt_template for the documented default.")
    shape = (Shape.chat if chat else Shape.text) if has_prompt else (Shape.implicit_chat if chat else
                                                                      Shape.implicit_text)
    return PairFormat(shape, prompt_column if has_prompt else None, chosen_column, rejected_column,
                      prompt_template if shape is Shape.text else None,
                      tuple(sorted((str(k), str(v)) for k, v in (roles or {}).items())) if chat else ())


def no_prompt(source: Source, column: str, missing: Any) -> DataError:
    """The paragraph for a table of pairs whose prompt column is missing (null) on some rows, ``missing`` (a boolean per
    row): rows with a prompt mixed with rows that share it inside chosen and rejected, or a column of nothing."""
    import numpy as np

    without, has = np.flatnonzero(missing), np.flatnonzero(~missing)
    more = ", ..." if len(without) > NOTED else ""
    if not len(has):
        return DataError(f"{source.key}={source.given}: its column {column} holds no prompt on any of its "
                         f"{len(without)} rows. Drop the column (chosen and rejected then start with the prompt they "
                         f"share), or fill it in (data.prompt_column names the column of prompts).")
    return DataError(f"{source.key}={source.given} mixes rows with a prompt and rows without one: "
                     f"{row_places(source, [int(has[0])])} has a {column}, {len(without)} of {len(missing)} rows have "
                     f"none ({row_places(source, without[:NOTED].tolist())}{more}). A table holds one shape: every row "
                     f"a {column} beside chosen and rejected, or no row one (chosen and rejected then start with the "
                     "prompt they share). Give those rows their prompt (and chosen and rejected only what follows "
                     f"it), or move each {column} into the start of its row's chosen and rejected.")


def missing_column(setting: str, value: str, names: list[str], source: Source) -> DataError:
    """A column that is not there: did-you-mean, the table's columns, the shapes preference data comes in."""
    matches = close_matches(value, names)
    hint = f"Did you mean {setting}={matches[0]}? " if matches else ""
    return DataError(f"{setting}={value}: {source.key}={source.given} has no column {value}. {hint}Its columns: "
                     f"{', '.join(names) or 'none'}. data=preference reads pairs: a chosen and a rejected completion "
                     "(data.chosen_column, data.rejected_column) of a prompt (data.prompt_column; without one, what "
                     "chosen and rejected share from the start is the prompt). Instruction data without a rejected "
                     "completion trains with data=instruct objective=sft.")
