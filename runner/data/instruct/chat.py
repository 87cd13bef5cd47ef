"""Conversations: how a chat row becomes messages, every turn accounted for, and the messages as text with their answers
marked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner.data.reading.sources import DataError, Source
from runner.data.reading.tables import cell_text, row_places

ROLES = ("system", "user", "assistant")  # The roles of the chat format; the assistant's turns are the answers
ANSWER_ROLE = "assistant"
# ShareGPT's ``from`` values and the roles they are (FastChat's and Axolotl's readings of the format)
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
                  "model": "assistant"}
# Columns recognised as conversations without ``data.messages_column``: transformers' and ShareGPT's names
CHAT_COLUMNS = ("messages", "conversations")
# The two shapes, in the words of every hint about a conversation column
SHAPES_HINT = ("a list of {\"role\", \"content\"} turns (system, user, assistant) or ShareGPT's {\"from\", \"value\"} "
               "(human, gpt, system)")

Segments = list[tuple[str, bool]]
Render = Callable[[list[dict[str, str]], bool], str]  # A chat template: ``(messages, add_generation_prompt) -> text``


class RoleError(ValueError):
    """A turn whose role is none of the chat format's and that ``data.roles`` does not map."""

    def __init__(self, role: str) -> None:
        super().__init__(f"role {role!r} is not one of {', '.join(ROLES)}")
        self.role = role


def role_map(roles: Mapping[str, str] | None) -> dict[str, str]:
    """``data.roles`` with the chat roles themselves: what each role as written becomes."""
    return {**{r: r for r in ROLES}, **{str(k): str(v) for k, v in (roles or {}).items()}}


def messages_of(cell: Any, roles: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """A conversation cell (a JSON string is parsed) as ``{"role", "content"}`` messages, each role mapped
    (``data.roles`` first, then ShareGPT's names for a ``from``/``value`` turn); ``RoleError`` for a role nothing maps,
    ``ValueError`` for a cell of neither shape."""
    value = json.loads(cell) if isinstance(cell, str) else cell
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise ValueError(f"not {SHAPES_HINT}")
    mapping = role_map(roles)
    out = []
    for m in value:
        if "role" in m and "content" in m:
            written, content, known = m["role"], m["content"], mapping
        elif "from" in m and "value" in m:
            written, content, known = m["from"], m["value"], {**SHAREGPT_ROLES, **mapping}
        else:
            raise ValueError(f"a turn with the keys {sorted(m)}: not {SHAPES_HINT}")
        role = known.get(str(written))
        if role is None:
            raise RoleError(str(written))
        out.append({"role": role, "content": cell_text(content)})
    return out


@dataclass(frozen=True)
class Turns:
    """What a column of conversations holds: its assistant turns and other turns (after mapping), how many turns had
    each role as written and what it became, and the first row whose role nothing maps."""

    answers: int  # Assistant turns
    others: int  # Other turns (system, user, roles kept as they are)
    # Role as written -> (the role it became, None when nothing maps it; turns), the most frequent first
    roles: dict[str, tuple[str | None, int]]
    unknown_row: int | None  # The first row with a role nothing maps (None: every role is known)
    sharegpt: bool  # Whether the turns are ShareGPT's ``from``/``value``

    def describe_roles(self) -> str:
        """``human -> user 40, gpt -> assistant 40, system 20``: each role as written, what it became, its turns."""
        return ", ".join(f"{w}{'' if r == w else f' -> {r}' if r else ' (no rule)'} {n}"
                         for w, (r, n) in self.roles.items())

    def as_meta(self) -> dict[str, Any]:
        """JSON-able, for a store's description."""
        return {"answers": self.answers, "others": self.others, "roles": [[w, r, n] for w, (r, n) in
                                                                           self.roles.items()],
                "unknown_row": self.unknown_row, "sharegpt": self.sharegpt}

    @staticmethod
    def from_meta(meta: dict[str, Any]) -> Turns:
        """The turns ``as_meta`` wrote (a store prepared by an earlier run)."""
        return Turns(int(meta["answers"]), int(meta["others"]), {w: (r, int(n)) for w, r, n in meta["roles"]},
                     meta["unknown_row"], bool(meta["sharegpt"]))


def count_turns(batches: Iterable[Any], column: str, roles: Mapping[str, str] | None) -> Turns:
    """Every turn of ``column`` in ``batches`` (a table's rows in order, ``table_batches``), counted a batch at a time,
    so that a million conversations are never held at once."""
    answers = others = rows = 0
    found: dict[str, tuple[str | None, int]] = {}
    unknown_row: int | None = None
    sharegpt = False
    for batch in batches:
        turns = scan(batch.column(column), roles)
        answers, others = answers + turns.answers, others + turns.others
        for written, (role, n) in turns.roles.items():
            found[written] = (role, found.get(written, (role, 0))[1] + n)
        if unknown_row is None and turns.unknown_row is not None:
            unknown_row = rows + turns.unknown_row
        sharegpt = sharegpt or turns.sharegpt
        rows += batch.num_rows
    ordered = dict(sorted(found.items(), key=lambda item: (-item[1][1], item[0])))
    return Turns(answers, others, ordered, unknown_row, sharegpt)


def scan(column: Any, roles: Mapping[str, str] | None) -> Turns:
    """Every turn of a column of conversations (a pyarrow array of lists of structs, or of JSON strings): its role,
    mapped as ``messages_of`` maps it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    struct = pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
    fields = {f.name for f in array.type.value_type} if struct and pa.types.is_struct(array.type.value_type) else set()
    key = "role" if "role" in fields else "from" if "from" in fields else None
    if key is not None and not ({"role", "from"} <= fields):
        flat = pc.list_flatten(array)
        written = flat.field(key).to_numpy(zero_copy_only=False).astype(str)
        parents = pc.list_parent_indices(array).to_numpy()
        return _counted(written, parents, roles, sharegpt=key == "from")
    written_list: list[str] = []
    parent_list: list[int] = []
    sharegpt = False
    for i, cell in enumerate(array.to_pylist()):
        try:
            value = json.loads(cell) if isinstance(cell, str) else cell
        except ValueError:
            continue  # the encoder names a cell that is no JSON
        for m in value if isinstance(value, list) else []:
            if isinstance(m, dict) and ("role" in m or "from" in m):
                sharegpt = sharegpt or "role" not in m
                written_list.append(str(m.get("role", m.get("from"))))
                parent_list.append(i)
    return _counted(np.array(written_list, dtype=str), np.array(parent_list, dtype=np.int64), roles, sharegpt)


def _counted(written: np.ndarray, parents: np.ndarray, roles: Mapping[str, str] | None, sharegpt: bool) -> Turns:
    mapping = {**(SHAREGPT_ROLES if sharegpt else {}), **role_map(roles)}
    names, counts = np.unique(written, return_counts=True) if len(written) else (np.array([], str), np.array([]))
    found = {str(n): (mapping.get(str(n)), int(c)) for n, c in sorted(zip(names, counts, strict=True),
                                                                      key=lambda nc: -int(nc[1]))}
    unknown = [n for n, (r, _) in found.items() if r is None]
    unknown_row = int(parents[np.isin(written, unknown)].min()) if unknown else None
    answers = int(sum(n for r, n in found.values() if r == ANSWER_ROLE))
    return Turns(answers, len(written) - answers, found, unknown_row, sharegpt)


def unknown_role(turns: Turns, source: Source, column: str) -> DataError:
    """The paragraph refusing a column of conversations (``turns``, ``scan``) where a role no rule maps: the file and
    line of the first row holding it, the roles found, the fix."""
    assert turns.unknown_row is not None
    role = next(w for w, (r, _) in turns.roles.items() if r is None)
    shape = "ShareGPT's human, gpt, system" if turns.sharegpt else ", ".join(ROLES)
    return DataError(
        f"{source.key}={source.given}, {row_places(source, [turns.unknown_row])}: a turn of {column} has the role "
        f"{role!r}, which is none of the chat format's ({shape}); roles found: {turns.describe_roles()}. The chat "
        "template would render it, but nothing says whether it is an answer, so its turns would fall out of the loss "
        f"without a word. Map it with +data.roles.{role}=assistant (or user or system; a role mapped to itself, "
        f"+data.roles.{role}={role}, is kept as it is, rendered and never in the loss), or fix those rows.")


def chat_segments(messages: list[dict[str, str]], render: Render) -> Segments:
    """A conversation as pieces: each assistant turn's text as the template renders it (its end-of-turn marker included)
    is an answer."""
    full = render(messages, False)
    cuts: list[tuple[int, int]] = []
    for i, m in enumerate(messages):
        if m["role"] != ANSWER_ROLE:
            continue
        last = i == len(messages) - 1  # the conversation through its last turn is the whole of it, rendered already
        before, through = render(messages[:i], True), full if last else render(messages[:i + 1], False)
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
        try:
            template = tokenizer.get_chat_template(chat_template)
        except ValueError:  # several templates, none the default: each render says so, as it always did
            return with_tokenizer
        return _compiled_render(template, dict(tokenizer.special_tokens_map)) or with_tokenizer
    if tokenizer is None and chat_template:
        from transformers.utils.chat_template_utils import render_jinja_template

        def alone(messages: list[dict[str, str]], generation: bool) -> str:
            rendered: Any = render_jinja_template([messages], chat_template=chat_template,  # (texts, indices)
                                                  add_generation_prompt=generation, bos_token="", eos_token="")
            return str(rendered[0][0])
        return _compiled_render(chat_template, {"bos_token": "", "eos_token": ""}) or alone
    return None


def _compiled_render(template: str, variables: dict[str, Any]) -> Render | None:
    """What ``apply_chat_template`` renders, without its copy of every message into plain data: runner's messages are
    plain ``{"role", "content"}`` strings already."""
    from runner.transformers_internals import compiled_chat_template

    compiled = compiled_chat_template(template)
    if compiled is None:
        return None

    def render(messages: list[dict[str, str]], generation: bool) -> str:
        return str(compiled.render(messages=messages, tools=None, documents=None, add_generation_prompt=generation,
                                   **variables))
    return render
