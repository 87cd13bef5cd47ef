"""One decode for runner's causal LMs (its GPT, transformers' causal LMs): a static KV cache, prompts left-padded into
a few length buckets, the prefill and the step compiled once per (batch, length) bucket, so that new prompt lengths and
counts reuse graphs instead of recompiling."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Sampling:
    """How new tokens are drawn: ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1 keep every token; writing
    stops at any of ``eos_ids``."""

    max_new_tokens: int = 200
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 1.0
    seed: int = 0
    eos_ids: tuple[int, ...] = ()

    def error(self) -> str | None:
        """What is wrong with these settings, in one paragraph (None: nothing)."""
        if self.max_new_tokens < 1:
            return f"--max-new-tokens {self.max_new_tokens}: give a number of tokens to write, >= 1."
        if self.temperature < 0:
            return f"--temperature {self.temperature}: give 0 (greedy) or more (1 samples as the model says)."
        if self.top_k < 0:
            return f"--top-k {self.top_k}: give 0 (every token) or the number of likeliest tokens to draw from."
        if not 0 < self.top_p <= 1:
            return f"--top-p {self.top_p}: give the share of probability to draw from, more than 0 and at most 1."
        return None


def next_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``logits`` ``[batch, vocab]``: the likeliest (temperature 0), or drawn at ``temperature``
    from the ``top_k`` likeliest within the ``top_p`` nucleus."""
    if sampling.temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / sampling.temperature
    if 0 < sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1:
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = ordered.softmax(-1)
        before = probs.cumsum(-1) - probs  # the probability of the likelier tokens: the first one is always kept
        drop = torch.empty_like(order, dtype=torch.bool).scatter(-1, order, before > sampling.top_p)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)


def bucket(n: int, floor: int) -> int:
    """The power of two at least ``n`` and ``floor``: a handful of shapes cover every length and count."""
    return max(floor, 1 << max(n - 1, 0).bit_length())


@dataclass
class Generated:
    """Each prompt's new token ids (its EOS left out), and the seconds to the first token and in all."""

    tokens: list[list[int]]
    first_token_s: float
    seconds: float
    # The graphs this call compiled, in words: none once its shapes have been seen (and none uncompiled).
    compiled: list[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return sum(map(len, self.tokens)) / self.seconds if self.seconds else 0.0


class _Transformers:
    """A transformers causal LM over transformers' own ``StaticCache``, one per bucket."""

    window = None  # positions past max_position_embeddings are the model's to refuse

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        self.caches: dict[tuple[int, int], Any] = {}

    def cache(self, batch: int, length: int) -> Any:
        from transformers import StaticCache

        if (batch, length) in self.caches:
            self.caches[batch, length].reset()
            return self.caches[batch, length]
        cache = StaticCache(config=self.hf.config, max_cache_len=length)
        # Allocated now, as transformers' chunked prefill does: a cache the prefill finds allocated on one call and
        # not on the next would recompile it. None: heads differ in shape (MLA); each call then gets a new cache.
        shape = self.hf._get_static_cache_init_shape()
        if shape is not None:
            cache.early_initialization(batch_size=batch, num_heads=shape[0], head_dim=shape[1],
                                       dtype=self.hf.dtype, device=self.hf.device)
            self.caches[batch, length] = cache
        return cache

    def __call__(self, cache: Any, ids: torch.Tensor, positions: torch.Tensor, at: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
        out = self.hf(input_ids=ids, position_ids=positions, cache_position=at, attention_mask=mask, cache=cache,
                      use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]


class _GPT:
    """runner's GPT over static keys and values; past ``block_size`` its absolute positions all shift with each token,
    so from there each token runs the whole window again (as its training did)."""

    def __init__(self, gpt: Any) -> None:
        self.gpt, self.window = gpt, int(gpt.block_size)

    def cache(self, batch: int, length: int) -> Any:
        cache = self.gpt.new_cache(batch, length)
        for tensor in (t for kv in cache for t in kv):
            # Written in place each step: CUDA graphs keep a graph whose input they mutate only at a fixed address.
            torch._dynamo.mark_static_address(tensor)
        return cache

    def __call__(self, cache: Any, ids: torch.Tensor, positions: torch.Tensor, at: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
        keys = torch.arange(mask.shape[1], device=at.device)
        allowed = mask.bool()[:, None, None, :] & (keys <= at[:, None])[None, None]
        # A padding position attends to itself alone: with no key at all its row of attention would be NaN, and
        # NaN times a zero weight is NaN in every row after it.
        allowed = allowed | (keys == at[:, None])[None, None]
        return self.gpt.decode(ids, positions, at, allowed, cache)


def _family(model: nn.Module) -> _Transformers | _GPT:
    from transformers import PreTrainedModel

    from runner.models.gpt import GPT

    if isinstance(model, GPT):
        return _GPT(model)
    # runner.models.hf.CausalLM holds the transformers model (whose own .model is its body, without the head)
    hf = model if isinstance(model, PreTrainedModel) else getattr(model, "model", None)
    if isinstance(hf, PreTrainedModel):
        return _Transformers(hf)
    raise TypeError(f"{type(model).__name__}: the decoder writes with runner's GPT or a transformers causal LM")


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd while writing; each submodule's mode restored after."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        for m, training in modes:
            m.training = training


class Decoder:
    """Writes tokens after batches of prompts with ``model``; ``compile``: the prefill and the step through
    ``torch.compile`` (``backend``, ``mode``: ``reduce-overhead`` captures them in CUDA graphs on a GPU)."""

    def __init__(self, model: nn.Module, compile: bool = True, backend: Any = "inductor", mode: str | None = None,
                 min_batch: int = 1, min_prompt: int = 16, min_length: int = 128) -> None:
        self.model, self.family, self.compiles = model, _family(model), compile
        self.floors = (min_batch, min_prompt, min_length)
        self.seen: set[str] = set()  # the shapes the prefill and the step have been called at

        def prefill(cache: Any, ids: torch.Tensor, positions: torch.Tensor, at: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
            return self.family(cache, ids, positions, at, mask)

        def step(cache: Any, ids: torch.Tensor, positions: torch.Tensor, at: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
            return self.family(cache, ids, positions, at, mask)

        # Two functions, so that the prefill's graphs and the step's are cached apart, and apart from training's.
        wrap: Callable[[Any], Any] = (lambda f: f) if not compile else (
            lambda f: torch.compile(f, backend=backend, mode=mode, fullgraph=True, dynamic=False))
        self._prefill, self._step = wrap(prefill), wrap(step)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sampling) -> Generated:
        """At most ``sampling.max_new_tokens`` after each prompt (none of them empty), all the prompts at once."""
        if not prompts or not all(prompts):
            raise ValueError("generate needs at least one prompt, each of at least one token")
        start = time.perf_counter()
        min_batch, min_prompt, min_length = self.floors
        count, new = len(prompts), sampling.max_new_tokens
        batch, width = bucket(count, min_batch), bucket(max(map(len, prompts)), min_prompt)
        window = self.family.window
        if window is not None and width > window:  # only the last window of a long prompt is read
            prompts, width = [p[-window:] for p in prompts], window
        length = bucket(width + new, min_length)
        length = length if window is None else min(length, window)
        device = next(self.model.parameters()).device
        rows = [*prompts, *[prompts[0]] * (batch - count)]  # filler rows up to the batch bucket, dropped at the end
        ids = torch.zeros(batch, width + new, dtype=torch.long, device=device)  # left-padded prompts, then new tokens
        for i, row in enumerate(rows):
            ids[i, width - len(row):width] = torch.tensor(row, device=device)
        real = torch.tensor([len(r) for r in rows], device=device)[:, None]  # each row's tokens so far
        generator = torch.Generator(device=device).manual_seed(sampling.seed) if sampling.temperature else None
        compiled: list[str] = []
        eos = torch.tensor(sampling.eos_ids or [-1], device=device)
        done = torch.zeros(batch, 1, dtype=torch.bool, device=device)
        pad = width - real  # each row's left padding, while the cache has room
        mask = self._mask(pad, length)
        with _eval_mode(self.model), torch._dynamo.config.patch(recompile_limit=64):
            cache = self.family.cache(batch, length)
            logits = self._window(cache, ids[:, :width], real, length, compiled)
            first_token_s = time.perf_counter() - start
            for i in range(new):
                token = next_token(logits, sampling, generator)
                if sampling.eos_ids:  # a finished row writes padding (cut below) until every row has finished
                    token = token.masked_fill(done, 0)
                    done = done | torch.isin(token, eos)
                ids[:, width + i] = token[:, 0]
                if i == new - 1 or (sampling.eos_ids and bool(done[:count].all())):
                    break
                at = width + i
                if at < length:  # room in the cache: one position
                    at_tensor = torch.tensor([at], device=device)
                    self._note(f"the step of {batch} into a cache of {length}", compiled)
                    logits = self._step(cache, token, at_tensor - pad, at_tensor, mask)
                else:  # runner's GPT past block_size: the last window again, whole
                    logits = self._window(cache, ids[:, at + 1 - length:at + 1], real + i + 1, length, compiled)
        tokens = []
        for row in ids[:count, width:width + i + 1].tolist():
            ends = [j for j, t in enumerate(row) if t in sampling.eos_ids]
            tokens.append(row[:ends[0]] if ends else row)
        return Generated(tokens, first_token_s, time.perf_counter() - start, compiled)

    def _note(self, shape: str, compiled: list[str]) -> None:
        """``shape`` into ``compiled`` the first time a compiled function runs at it: each shape is one graph."""
        if self.compiles and shape not in self.seen:
            compiled.append(shape)
        self.seen.add(shape)

    def _window(self, cache: Any, ids: torch.Tensor, real: torch.Tensor, length: int,
                compiled: list[str]) -> torch.Tensor:
        """The prefill of left-padded ``ids`` (``real`` tokens in each row) into the start of ``cache``."""
        batch, width = ids.shape
        self._note(f"the prefill of {batch} x {width} into a cache of {length}", compiled)
        pad = (width - real).clamp(min=0)
        positions = (torch.arange(width, device=ids.device)[None] - pad).clamp(min=0)
        return self._prefill(cache, ids, positions, torch.arange(width, device=ids.device), self._mask(pad, length))

    @staticmethod
    def _mask(pad: torch.Tensor, length: int) -> torch.Tensor:
        """``[batch, length]``: 0 at each row's left padding; the positions not yet written stay 1, as causality
        hides them until they are."""
        return (torch.arange(length, device=pad.device)[None] >= pad).long()
