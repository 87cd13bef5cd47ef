"""Typed schemas of the data options runner ships, on one base: what every data module takes is declared once, in
:class:`DataSchema`, and an option redeclares only a default that differs (each schema's defaults are its data module's:
``tests/test_data_schemas.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, Optional


class Batching(Enum):
    """How text becomes batches."""

    packed = "packed"  # fixed-length windows over the concatenated corpus
    documents = "documents"  # one sequence per document (chunked at max_len), padded per batch


class TrainOn(Enum):
    """Which tokens of instruction data the loss covers."""

    answer = "answer"  # the answers and their EOS (every assistant turn of a chat)
    all = "all"  # every token, prompts and templates too


# The default of data.tokenizer: the tokenizer saved beside the model (model.path), else UTF-8 bytes.
MODEL_TOKENIZER = "${oc.select:model.path,null}"


@dataclass
class DataSchema:
    """What every data module takes. ``config``, ``split`` and ``val_split`` choose within a Hub data set; the config
    resolves them to files, so no data module takes them."""

    NOT_ARGUMENTS: ClassVar[tuple[str, ...]] = ("config", "split", "val_split")
    _target_: str = ""
    batch_size: int = 16
    # The share of the data that validates (split by document or row, never overlapping training), when data.val_path
    # gives none.
    val_fraction: float = 0.1
    seed: int = 0  # Seeds the split and the order of the training batches.
    num_workers: int = 0  # DataLoader worker processes (0: batches are made in the training process).
    # A Hub data set's config (data.path=hf://datasets/ORG/NAME; None: its default, or its only one).
    config: Optional[str] = None
    split: Optional[str] = None  # The Hub data set's split that trains (None: train).
    # The split that validates: of data.val_path's data set where it names one, else of data.path's (None: its
    # validation split if it has one, else a seeded share of the training rows).
    val_split: Optional[str] = None


@dataclass
class TextDataSchema(DataSchema):
    """Text for a causal LM: UTF-8 bytes, or a saved tokenizer's ids (``runner.data.text.TextDataModule``)."""

    _target_: str = "runner.data.text.TextDataModule"
    val_fraction: float = 0.05
    # A file, a folder or a glob: text files (every UTF-8 file, whatever its name; binary files are skipped),
    # .jsonl/.json, .csv or .parquet tables (their text_column), or a save_to_disk folder; None: the Python stdlib
    # source.
    path: Optional[str] = None
    # What validates, in data.path's forms; None: a split of data.path (by document, or the last windows of a single
    # document), never overlapping training.
    val_path: Optional[str] = None
    # bytes (UTF-8 bytes, ids 0-255) or a directory holding a saved tokenizer. Default: the model's own (model.path),
    # else bytes.
    tokenizer: Optional[str] = MODEL_TOKENIZER
    text_column: str = "text"  # A table's column of text (each row a document).
    batching: Batching = Batching.packed
    seq_len: int = 256  # Packed: window length. Documents: documents longer than this are cut into chunks.
    min_len: int = 16  # Documents: shorter chunks are dropped.
    # Documents: split each text file into documents here (blank lines: one block of code or prose per sequence, so
    # lengths vary naturally); null keeps each file whole. Packed: what joins a table's rows.
    separator: Optional[str] = "\n\n"
    # Read at most this many bytes of text (None: all): the files, or rows, up to the one that reaches it. What it
    # leaves out is said in the run's data section.
    max_bytes: Optional[int] = 4_000_000
    # Documents: sort each window of this many shuffled batches by length (0: random batches). Less padding per batch,
    # which is what the dynamic-shape policies turn into shorter steps.
    length_grouping: int = 0
    # Documents: pack them into rows of exactly seq_len tokens (best fit), position ids restarting and attention never
    # crossing documents: no padding to speak of, and one batch shape (docs/data.md#packing).
    packing: bool = False


@dataclass
class TokenizedTextDataSchema(TextDataSchema):
    """``data=text`` whose tokenizer must be a saved one (default: the model's, ``model.path``)
    (``runner.data.text.TokenizedTextDataModule``)."""

    _target_: str = "runner.data.text.TokenizedTextDataModule"
    tokenizer: Optional[str] = "${model.path}"  # The directory a tokenizer was saved to (default: the model's).


@dataclass
class _PromptedDataSchema(DataSchema):
    """What instruction data and preference pairs both take: a table of prompts and their completions."""

    # A table: .jsonl/.json, .csv, .parquet or a save_to_disk folder (e.g. examples/data/instruct.jsonl,
    # examples/data/preference.jsonl).
    path: Optional[str] = None
    # What validates, in data.path's forms; None: a seeded split of data.path's rows.
    val_path: Optional[str] = None
    # bytes (UTF-8 bytes; byte 4 ends each answer or completion) or a directory holding a saved tokenizer. Default: the
    # model's own (model.path), else bytes.
    tokenizer: Optional[str] = MODEL_TOKENIZER
    # The prompt: text (put in data.prompt_template); for pairs also a list of {role, content} messages (the chat
    # template's generation prompt after it), and a table of pairs without it has an implicit prompt: what chosen and
    # rejected share.
    prompt_column: str = "prompt"
    # The prompt around the prompt column's text ({prompt}; Alpaca: {instruction}, {input}). None: the documented
    # default (docs/data.md).
    prompt_template: Optional[str] = None
    chat_template: Optional[str] = None  # A Jinja chat template for conversations (None: the tokenizer's own).
    # Conversations: what each role as written becomes (+data.roles.bot=assistant); system, user and assistant are
    # themselves, ShareGPT's human and gpt are user and assistant. Any other role is refused before the run (a role
    # mapped to itself is kept as it is, out of the loss).
    roles: dict[str, str] = field(default_factory=dict)
    # Longest sequence (an example; for pairs, prompt + one completion), in tokens: a longer one loses the end of its
    # answer, one whose prompt fills it is left out (both counted).
    seq_len: int = 256
    # Pack examples (a pair's two sequences in one row) into rows of exactly seq_len tokens (best fit), position ids
    # restarting and attention never crossing them: one batch shape, little padding.
    packing: bool = False
    max_examples: Optional[int] = None  # Read at most this many rows (None: all).


@dataclass
class InstructDataSchema(_PromptedDataSchema):
    """Instruction or chat data for a causal LM, the loss on the answers (``runner.data.instruct.InstructDataModule``,
    docs/data.md#instruction-and-chat-data)."""

    _target_: str = "runner.data.instruct.InstructDataModule"
    response_column: str = "response"
    # A column of conversations (lists of {role, content}, or ShareGPT's {from, value}), rendered with the chat
    # template; every assistant turn is an answer. None: a column named messages or conversations, when the table has no
    # prompt/response and no Alpaca columns.
    messages_column: Optional[str] = None
    train_on: TrainOn = TrainOn.answer  # The loss on the answers and their EOS (answer), or on every token (all).


@dataclass
class PreferenceDataSchema(_PromptedDataSchema):
    """Pairs of completions of one prompt, one chosen and one rejected, for a preference objective
    (``runner.data.preference.PreferenceDataModule``, docs/preference.md)."""

    _target_: str = "runner.data.preference.PreferenceDataModule"
    # Pairs a batch: each is two sequences (prompt + chosen, prompt + rejected) through one forward.
    batch_size: int = 8
    chosen_column: str = "chosen"  # The preferred completion: text, or messages (the assistant's turns).
    rejected_column: str = "rejected"  # The other completion, in the chosen column's form.


@dataclass
class TextClassificationDataSchema(DataSchema):
    """Labelled text, one padded variable-length batch at a time
    (``runner.data.classification.TextClassificationDataModule``)."""

    _target_: str = "runner.data.classification.TextClassificationDataModule"
    # A file, a folder or a glob of labelled rows: .jsonl/.json, .csv or .parquet tables, a save_to_disk folder, or text
    # files of label<TAB>text lines. None: paragraphs of the Python stdlib source labelled by their package.
    path: Optional[str] = None
    # Rows that validate, in data.path's forms; None: a seeded split of data.path's rows.
    val_path: Optional[str] = None
    # bytes (UTF-8 bytes, ids 1-256, 0 pads) or a directory holding a saved tokenizer. Default: the model's own
    # (model.path), else bytes.
    tokenizer: Optional[str] = MODEL_TOKENIZER
    text_column: str = "text"  # The column of text.
    # The column of labels: class ids (0, 1, ...) or class names (numbered in sorted order), one kind.
    label_column: str = "label"
    # Classes the rows hold (the model's num_labels follows it); checked against the data before the run.
    num_classes: int = 4
    seq_len: int = 128  # Longest sequence: longer texts are cut here (counted in the run's data section).
    min_len: int = 16  # Shorter texts (in bytes) are left out.
    max_examples: Optional[int] = 20_000  # Read at most this many rows (None: all).


@dataclass
class ImageDataSchema(DataSchema):
    """Images from a local folder (torchvision's ImageFolder layout) or synthetic ones
    (``runner.data.images.ImageDataModule``)."""

    _target_: str = "runner.data.images.ImageDataModule"
    batch_size: int = 32
    path: Optional[str] = None  # ROOT/CLASS/IMAGE (optionally under ROOT/train and ROOT/val); None: synthetic images.
    image_size: int = 64
    num_classes: int = 10
    num_samples: int = 2048  # Synthetic images: how many (train and val).
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])


@dataclass
class SyntheticDataSchema(DataSchema):
    """Random classification data for the MLP (``runner.data.synthetic.SyntheticDataModule``)."""

    _target_: str = "runner.data.synthetic.SyntheticDataModule"
    batch_size: int = 64
    in_features: int = 32
    num_classes: int = 10
    num_samples: int = 4096
