"""What turns text into token ids: UTF-8 bytes, or a tokenizer saved in a directory (``save_pretrained``).
``data.tokenizer`` names one: ``bytes`` (or null) for UTF-8 bytes, or a directory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runner.config.target_objects import TokenRange

BYTES = "bytes"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")
# What a saved tokenizer's files are named (``chat_template.jinja``: transformers' chat template, saved apart)
_SAVED_PREFIXES = ("tokenizer", "special_tokens", "added_tokens", "vocab", "merges", "spiece", "chat_template")


def is_bytes(spec: str | None) -> bool:
    """Whether ``data.tokenizer`` asks for UTF-8 bytes (``bytes``, or null/empty)."""
    return spec is None or spec.strip() in ("", BYTES)


class ByteTokens:
    """UTF-8 bytes as ids ``offset .. 255 + offset``; ``pad_id`` 0."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.pad_id = 0
        self.vocab_size = 256 + offset
        self.name = BYTES
        self.eos_id: int | None = None

    def __call__(self, texts: Sequence[str], max_len: int | None = None, special: bool = True) -> list[np.ndarray]:
        """Each text's bytes as ids; the first ``max_len`` when given (bytes have no special tokens)."""
        return [np.frombuffer(t.encode("utf-8")[:max_len], dtype=np.uint8).astype(np.int32) + self.offset
                for t in texts]


class SavedTokenizer:
    """A tokenizer saved in ``path`` (local files only): ``pad_id`` is its pad token's id, else its eos id, else 0."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self.name = str(path)
        self.tokenizer = AutoTokenizer.from_pretrained(str(Path(path).expanduser()), local_files_only=True)
        pad = self.tokenizer.pad_token_id
        eos = self.tokenizer.eos_token_id
        self.eos_id = None if eos is None else int(eos)
        self.pad_id = int(pad) if pad is not None else (self.eos_id or 0)
        self.vocab_size = len(self.tokenizer)

    def __call__(self, texts: Sequence[str], max_len: int | None = None, special: bool = True) -> list[np.ndarray]:
        """Each text's ids, with the tokenizer's special tokens unless ``special`` is False; cut to ``max_len`` (special
        tokens kept) when given."""
        if not max_len:
            return [np.asarray(x, dtype=np.int32) for x in self.ids(texts, special)]
        ids = self.tokenizer(list(texts), add_special_tokens=special, truncation=True, max_length=max_len)
        return [np.asarray(x, dtype=np.int32) for x in ids["input_ids"]]

    def ids(self, texts: Sequence[str], special: bool = True) -> list[list[int]]:
        """Each text's ids as a list: what ``tokenizer(texts)["input_ids"]`` gives, straight from a fast tokenizer's
        backend where it has one (``encode_batch_fast``: no offsets or attention masks made and dropped again, 1.7x the
        throughput on instruction prompts)."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        encode = getattr(backend, "encode_batch_fast", None) or getattr(backend, "encode_batch", None)
        if encode is None:
            return [list(x) for x in self.tokenizer(list(texts), add_special_tokens=special)["input_ids"]]
        return [e.ids for e in encode(list(texts), add_special_tokens=special)]


Tokenizer = ByteTokens | SavedTokenizer


def load_tokenizer(spec: str | None, offset: int = 0) -> Tokenizer:
    """The tokenizer ``data.tokenizer`` names; ``offset``: where a family's byte ids start."""
    return ByteTokens(offset) if is_bytes(spec) else SavedTokenizer(str(spec))


def tokenizer_stamp(tokenizer: Tokenizer) -> Any:
    """What identifies a tokenizer for a cache of its ids: ``bytes`` and the offset, or the digest of its saved files'
    contents (not its name or its files' times: another tokenizer saved under the same name is another tokenizer, and
    one copied elsewhere is the same)."""
    from runner.data.store import digest_files

    if isinstance(tokenizer, ByteTokens):
        return [BYTES, tokenizer.offset]
    return digest_files(saved_files(tokenizer.name), names=True)  # their names with them


def saved_files(directory: str) -> list[Path]:
    """The files of the tokenizer saved in ``directory`` (its vocabulary, merges, configuration, special tokens and chat
    template), sorted by name."""
    root = Path(directory).expanduser()
    return sorted((f for f in root.iterdir() if f.is_file() and (f.name.startswith(_SAVED_PREFIXES)
                                                                 or f.name in TOKENIZER_FILES)),
                  key=lambda f: f.name)


def check_tokenizer(spec: str | None) -> str | None:
    """What is wrong with ``data.tokenizer``, in one paragraph (None: nothing)."""
    if is_bytes(spec):
        return None
    root = Path(str(spec)).expanduser()
    if not root.is_dir():
        return (f"data.tokenizer={spec} is not a directory. Give the directory a tokenizer was saved to "
                "(tokenizer.save_pretrained(DIR); with model.path it defaults to the model's), or "
                "data.tokenizer=bytes for UTF-8 bytes.")
    if not any((root / f).is_file() for f in TOKENIZER_FILES):
        return (f"data.tokenizer={spec} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}). Give the "
                "directory tokenizer.save_pretrained(DIR) wrote, or data.tokenizer=bytes for UTF-8 bytes.")
    return None


def token_range(spec: str | None, offset: int = 0) -> TokenRange | None:
    """The largest id and the pad id text can get from ``data.tokenizer``; None when it does not load (its own check
    says why)."""
    if is_bytes(spec):
        return TokenRange(largest=255 + offset, pad=0, source=f"data.tokenizer={BYTES} (UTF-8 bytes)")
    if check_tokenizer(spec) is not None:
        return None
    try:
        tokenizer = SavedTokenizer(str(spec))
    except Exception:  # a directory transformers cannot read: the run says how
        return None
    return TokenRange(largest=tokenizer.vocab_size - 1, pad=tokenizer.pad_id,
                      source=f"data.tokenizer={spec} ({tokenizer.vocab_size} ids)")
