"""Instruction and chat data for a causal LM: the loss on the answers, an EOS after each (``data=instruct``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from torch.utils.data import DataLoader

from runner.config.schema.data import TrainOn
from runner.data.instruct.encode import eos_id
from runner.data.instruct.fit import Fitted
from runner.data.instruct.formats import prompt_info
from runner.data.instruct.layout import Layout, arrange
from runner.data.instruct.prepare import SHIPPED, prepare, refuse_problems
from runner.data.instruct.refusals import PromptedData, batch_refusal, prepare_parts, read_to_check
from runner.data.instruct.summary import describe, summarize
from runner.data.sequences.packed import Examples, Packs, pack_collate
from runner.data.sequences.padding import PadCollate, PadTo, seeded_loader
from runner.data.tokens.tokenizers import SavedTokenizer, Tokenizer, is_bytes, load_tokenizer
from runner.data.traits import DataTraits, ValMetric

log = logging.getLogger(__name__)


class InstructDataModule(PromptedData):
    """Instruction or chat rows."""

    def __init__(self, path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                 prompt_column: str = "prompt", response_column: str = "response",
                 messages_column: str | None = None, prompt_template: str | None = None,
                 chat_template: str | None = None, roles: Mapping[str, str] = MappingProxyType({}),
                 train_on: TrainOn | str = TrainOn.answer, seq_len: int = 256, packing: bool = False,
                 max_examples: int | None = None, batch_size: int = 16, val_fraction: float = 0.1, seed: int = 0,
                 num_workers: int = 0, pad_to: PadTo | None = None) -> None:
        super().__init__(path, val_path, tokenizer, roles, seq_len, packing, batch_size, val_fraction, seed,
                         num_workers, pad_to, prompt_column=prompt_column, response_column=response_column,
                         messages_column=messages_column, prompt_template=prompt_template,
                         chat_template=chat_template, max_examples=max_examples)
        self.answers_only = TrainOn(train_on) is TrainOn.answer
        self._train: Examples | Packs | None = None
        self._val: Examples | Packs | None = None

    @staticmethod
    def check_arguments(path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                        seq_len: int = 256, batch_size: int = 16, packing: bool = False,
                        train_on: TrainOn | str = TrainOn.answer, val_fraction: float = 0.1, seed: int = 0,
                        **settings: Any) -> str | None:
        """What makes the data unusable, in one paragraph, before a run directory exists (None: nothing)."""
        read = read_to_check(
            lambda: InstructDataModule(path, val_path, tokenizer, seq_len=seq_len, batch_size=batch_size,
                                       packing=packing, train_on=train_on, val_fraction=val_fraction, seed=seed,
                                       **{k: v for k, v in settings.items() if k not in ("num_workers", "pad_to")}),
            path, val_path, tokenizer,
            missing=(f"data=instruct needs data.path: a table of examples with prompt and response columns, Alpaca's "
                     f"instruction/input/output, or conversations. runner ships one: data.path={SHIPPED} "
                     "(+recipe=instruct_tiny trains on it)."),
            ends="instruction data ends every answer with it, so that the model learns to stop")
        if not isinstance(read, tuple):
            return read
        train, val = read
        for key, where, fitted in (("data.path", path, train), ("data.val_path", val_path, val)):
            if fitted is not None and fitted.whole == 0:
                return (f"{key}={where}: every example is longer than data.seq_len={seq_len} tokens, so none would "
                        "train whole (each would lose the end of its answer and its EOS, or all of it). Raise "
                        "data.seq_len (the model's positions must cover it: model.block_size or "
                        "max_position_embeddings follow it in runner's options), or shorten the examples.")
        n = len(train.packs) if train.packs is not None else len(train.spans)
        what = "packed rows" if packing else "training examples"
        return batch_refusal(path, n, what, seq_len, batch_size, "examples")

    @staticmethod
    def traits(tokenizer: str | None = None, packing: bool = False, **_: Any) -> DataTraits:
        """Bits per byte on bytes; padded per batch and varying in shape, unless packed (one shape)."""
        metric = ValMetric.bits_per_byte if is_bytes(tokenizer) else ValMetric.none
        return DataTraits(metric, pads_per_batch=not packing, shapes_vary=not packing)

    def read(self, tokenizer: Tokenizer) -> tuple[Fitted, Fitted]:
        """Training and validation examples, fitted to ``seq_len`` (and packed, with packing); ``DataError`` when the
        rows cannot train."""
        self._parts = parts = prepare_parts(self.path, self.val_path,
                                            lambda where, key: prepare(where, key, tokenizer, **self.settings),
                                            refuse_problems)
        layout: Layout = arrange([p.store for p in parts], [p.key for p in parts], self.seq_len, self.answers_only,
                                 self.packing, self.val_fraction, self.seed, f"data.path={self.path}")
        self.split_how = layout.split_how
        return layout.train, layout.val

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        tokenizer = load_tokenizer(self.tokenizer_spec)
        self.pad_id = tokenizer.pad_id
        train, val = self.read(tokenizer)
        fmt = self._parts[0].fmt
        inner = tokenizer.tokenizer if isinstance(tokenizer, SavedTokenizer) else None
        self.prompt_format = {**prompt_info(fmt, self.settings["chat_template"], inner), "eos_id": eos_id(tokenizer)}
        self._train, self._val = (self._dataset(f) for f in (train, val))
        packs = self._train.figures(self.batch_size) if isinstance(self._train, Packs) else None
        self.summary, self.data_figures = summarize(self._parts, (train, val), len(self._train), len(self._val),
                                                    self.split_how, fmt, packs)
        self.say_parts("instruction examples")
        self.summary.say(self.seq_len)
        log.info("data: %s", describe(self.data_figures))
        if len(self._train) == 0 or len(self._val) == 0:  # the checks before the run say why first
            which = "training" if len(self._train) == 0 else "validation"
            raise ValueError(f"data: no {which} examples fit data.seq_len={self.seq_len}; raise data.seq_len or "
                             "give shorter examples.")

    def _dataset(self, fitted: Fitted) -> Examples | Packs:
        examples = Examples(fitted.tokens, fitted.spans, fitted.mask, self.answers_only)
        return Packs(examples, self.seq_len, self.pad_id, fitted.packs) if self.packing else examples

    def _loader(self, ds: Examples | Packs, shuffle: bool) -> DataLoader:
        collate = pack_collate if self.packing else PadCollate(self.pad_to, self.pad_id)
        return seeded_loader(ds, self.batch_size, self.seed, self.num_workers, shuffle, collate_fn=collate)
