"""Preference pairs for a causal LM (``data=preference``, ``objective=dpo|simpo|orpo``; docs/preference.md)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from torch.utils.data import DataLoader

from runner.data.instruct.encode import BYTES_EOS, eos_id
from runner.data.instruct.formats import PAIR_TEMPLATE, Format, Kind, prompt_info, template_render
from runner.data.instruct.layout import split_rows
from runner.data.instruct.refusals import PromptedData, batch_refusal, prepare_parts, read_to_check
from runner.data.preference.batch import PackCollate, PairCollate, PairPacks, PairSequences
from runner.data.preference.encode import FittedPairs, fit_pairs
from runner.data.preference.formats import PairFormat, Shape
from runner.data.preference.read import SHIPPED, prepare_pairs, refuse_problems
from runner.data.sequences.padding import PadTo, seeded_loader
from runner.data.summary import DataSummary
from runner.data.tokens.tokenizers import SavedTokenizer, Tokenizer, load_tokenizer
from runner.data.traits import DataTraits, ValMetric
from runner.metrics import counted

log = logging.getLogger(__name__)

CUT_PART = "the end of the completion, and its EOS"


# Pairs this process has split and fitted, by their stores and settings (a few numbers a pair: at a million pairs the
# split and the fit take seconds, and the checks before the run read the data as the run does)
_FITTED: dict[tuple[Any, ...], tuple[FittedPairs, FittedPairs, str]] = {}


class PreferenceDataModule(PromptedData):
    """Preference pairs."""

    def __init__(self, path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                 prompt_column: str = "prompt", chosen_column: str = "chosen", rejected_column: str = "rejected",
                 prompt_template: str | None = None, chat_template: str | None = None,
                 roles: Mapping[str, str] = MappingProxyType({}), seq_len: int = 256,
                 packing: bool = False, max_examples: int | None = None, batch_size: int = 8,
                 val_fraction: float = 0.1, seed: int = 0, num_workers: int = 0, pad_to: PadTo | None = None) -> None:
        super().__init__(path, val_path, tokenizer, roles, seq_len, packing, batch_size, val_fraction, seed,
                         num_workers, pad_to, prompt_column=prompt_column, chosen_column=chosen_column,
                         rejected_column=rejected_column, prompt_template=prompt_template,
                         chat_template=chat_template, max_examples=max_examples)
        self._train: PairSequences | PairPacks | None = None
        self._val: PairSequences | PairPacks | None = None

    @staticmethod
    def check_arguments(path: str | None = None, val_path: str | None = None, tokenizer: str | None = None,
                        seq_len: int = 256, batch_size: int = 8, packing: bool = False, val_fraction: float = 0.1,
                        seed: int = 0, **settings: Any) -> str | None:
        """What makes the data unusable, in one paragraph, before a run directory exists (None: nothing)."""
        read = read_to_check(
            lambda: PreferenceDataModule(path, val_path, tokenizer, seq_len=seq_len, batch_size=batch_size,
                                         packing=packing, val_fraction=val_fraction, seed=seed,
                                         **{k: v for k, v in settings.items() if k not in ("num_workers", "pad_to")}),
            path, val_path, tokenizer,
            missing=("data=preference needs data.path: a table of pairs, a chosen and a rejected completion of a "
                     "prompt (columns prompt, chosen, rejected; or chosen/rejected conversations). runner ships one: "
                     f"data.path={SHIPPED} (+recipe=llama_dpo trains on it)."),
            ends="preference data ends every completion with it, so that the model learns where an answer stops")
        if not isinstance(read, tuple):
            return read
        train, val = read
        for key, where, fitted in (("data.path", path, train), ("data.val_path", val_path, val)):
            if fitted is not None and len(fitted) == 0:
                return (f"{key}={where}: no pair fits data.seq_len={seq_len} tokens (each prompt leaves a completion "
                        "no room), so none would train. Raise data.seq_len (the model's positions must cover it: "
                        "model.block_size or max_position_embeddings follow it in runner's options), or shorten "
                        "the prompts.")
        n = len(PairPacks(train, seq_len, 0)) if packing else len(train)
        return batch_refusal(path, n, "packed rows" if packing else "training pairs", seq_len, batch_size, "pairs")

    @staticmethod
    def traits(packing: bool = False, **_: Any) -> DataTraits:
        """Padded per batch and varying in length, unless packed (one shape)."""
        return DataTraits(ValMetric.none, pads_per_batch=not packing, shapes_vary=not packing, pairs=True)

    def read(self, tokenizer: Tokenizer) -> tuple[FittedPairs, FittedPairs]:
        """Training and validation pairs, fitted to ``seq_len``; ``DataError`` when the rows cannot train."""
        inner = tokenizer.tokenizer if isinstance(tokenizer, SavedTokenizer) else None
        render = template_render(inner, self.settings["chat_template"])
        self._parts = parts = prepare_parts(
            self.path, self.val_path, lambda where, key: prepare_pairs(where, key, tokenizer, render, **self.settings),
            refuse_problems)
        memo = (tuple(p.stamp for p in parts), self.seq_len, self.val_fraction, self.seed)
        if memo not in _FITTED:  # the checks before the run and the run itself split and fit once
            train_rows, val_rows, how = split_rows(parts[0].rows, parts[-1].rows, len(parts) > 1, self.val_fraction,
                                                   self.seed, f"data.path={self.path}", "pairs")
            _FITTED[memo] = (fit_pairs(parts[0].store, train_rows, self.seq_len),
                             fit_pairs(parts[-1].store, val_rows, self.seq_len), how)
        train, val, self.split_how = _FITTED[memo]
        return train, val

    def prepare_data(self) -> None:
        """Read and tokenize once (rank 0 of each node, before the others set up): later reads hit the cache."""
        self.setup()

    @property
    def datasets(self) -> dict[str, PairSequences | PairPacks]:
        """The training and validation pairs, after ``setup``."""
        return {} if self._train is None or self._val is None else {"train": self._train, "val": self._val}

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        tokenizer = load_tokenizer(self.tokenizer_spec)
        self.pad_id = tokenizer.pad_id
        train, val = self.read(tokenizer)
        fmt = self._parts[0].fmt
        # What ``generate`` needs to ask the model as it was trained (``prompt.json``): a chat, or a pair's template
        template = (fmt.template or PAIR_TEMPLATE) if fmt.shape is Shape.text else "{prompt}"
        as_instruct = Format(Kind.chat if fmt.shape.conversational else Kind.pair, (), template)
        inner = tokenizer.tokenizer if isinstance(tokenizer, SavedTokenizer) else None
        self.prompt_format = {**prompt_info(as_instruct, self.settings["chat_template"], inner),
                              "eos_id": eos_id(tokenizer)}
        if self.packing:
            train_packs, val_packs = PairPacks(train, self.seq_len, self.pad_id), PairPacks(val, self.seq_len,
                                                                                            self.pad_id)
            # One batch shape for training and validation
            train_packs.per_row = val_packs.per_row = max(train_packs.per_row, val_packs.per_row)
            self._train, self._val = train_packs, val_packs
        else:
            self._train, self._val = PairSequences(train), PairSequences(val)
        self.summary, self.data_figures = self._summarize(train, val, fmt)
        self.say_parts("preference pairs")
        self.summary.say(self.seq_len)
        log.info("data: %s; %d pairs, %d prompt and %d completion tokens%s", fmt.describe(), len(train) + len(val),
                 self.data_figures["data/prompt_tokens"], self.data_figures["data/completion_tokens"],
                 f"; packed into {counted(self.data_figures['data/packs'], 'row')} "
                 f"({self.data_figures['data/packing_padding_pct']}% padding)" if self.packing else "")
        if len(self._train) == 0 or len(self._val) == 0:  # the checks before the run say why
            which = "training" if len(self._train) == 0 else "validation"
            raise ValueError(f"data: no {which} pairs fit data.seq_len={self.seq_len}; raise data.seq_len or give "
                             "shorter prompts.")

    def _summarize(self, train: FittedPairs, val: FittedPairs, fmt: PairFormat) -> tuple[DataSummary, dict[str, Any]]:
        parts = self._parts
        dropped = {("data.val_path: " if i else "") + k: n for i, p in enumerate(parts) for k, n in p.dropped.items()}
        for fitted in (train, val):
            for reason, n in fitted.left_out.items():
                dropped[reason] = dropped.get(reason, 0) + n
        used = len(train) + len(val)
        tokens = sum(f.prompt_tokens + f.completion_tokens for f in (train, val))
        summary = DataSummary("; ".join(p.source for p in parts), sum(p.files for p in parts),
                              sum(p.rows for p in parts), tokens, len(self.datasets["train"]),
                              len(self.datasets["val"]), self.split_how, truncated=train.cut + val.cut, used=used,
                              dropped=dropped)
        completion = train.completion_tokens + val.completion_tokens
        own: dict[str, Any] = {"data/format": fmt.describe(), "data/pairs": used,
                               "data/prompt_tokens": train.prompt_tokens + val.prompt_tokens,
                               "data/completion_tokens": completion, "data/loss_tokens": completion}
        if summary.truncated:
            own["data/cut_part"] = CUT_PART
        if self.packing:
            own.update(self._train.figures(self.batch_size))  # type: ignore[union-attr]
        return summary, own

    def reference_key(self) -> list[Any]:
        """What the pairs' log-probabilities depend on, besides the model: each table's store, its rows, its shape and
        columns, the templates, the tokenizer's files, the EOS, ``seq_len``."""
        from runner.data.tokens.tokenizers import tokenizer_stamp

        tokenizer = load_tokenizer(self.tokenizer_spec)
        parts = [[p.stamp, p.rows, p.fmt.shape.value, p.fmt.prompt_column, p.fmt.chosen_column,
                  p.fmt.rejected_column, p.fmt.template, p.fmt.roles] for p in self._parts]
        return [parts, self.settings["chat_template"], tokenizer_stamp(tokenizer), eos_id(tokenizer), BYTES_EOS,
                self.seq_len, self.split_how, self.val_fraction, self.seed]

    def collate(self) -> PairCollate | PackCollate:
        """The collate of every loader (one batch shape: a last, smaller batch is filled with empty pairs)."""
        train = self._train
        if isinstance(train, PairPacks):
            return PackCollate(self.batch_size, train.per_row, train.length, self.pad_id)
        return PairCollate(self.pad_to, self.pad_id, self.batch_size)

    def loader(self, which: str) -> DataLoader:
        """``which`` (``train``, ``val``) in batches, in order (the reference pass's)."""
        assert self.datasets, "setup() first"
        return self._loader(self.datasets[which], shuffle=False)

    def _loader(self, ds: PairSequences | PairPacks, shuffle: bool) -> DataLoader:
        return seeded_loader(ds, self.batch_size, self.seed, self.num_workers, shuffle, collate_fn=self.collate())
