"""A small decoder-only transformer in the spirit of nanoGPT: the whole model on one screen. ``forward(idx)`` takes byte
ids ``[batch, seq]`` and returns logits ``[batch, seq, vocab]``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runner.config.target_objects import Embedding
from runner.packing import PackedInputs, document_attention, layer_documents

KV = tuple[torch.Tensor, torch.Tensor]  # One layer's keys and values, each ``[batch, n_head, positions, head_dim]``


@dataclass
class KVCache:
    """Each layer's keys and values of the positions ``GPT.decode`` has run so far (generation only)."""

    layers: list[KV | None] = field(default_factory=list)

    @property
    def length(self) -> int:
        """Positions cached."""
        first = self.layers[0] if self.layers else None
        return 0 if first is None else int(first[0].shape[2])


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"model.n_embd={n_embd} must be divisible by model.n_head={n_head}")
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, documents: torch.Tensor | None = None) -> torch.Tensor:
        return self.decode(x, None, documents)[0]

    def decode(self, x: torch.Tensor, past: KV | None,
               documents: torch.Tensor | None = None) -> tuple[torch.Tensor, KV]:
        """``forward`` of new positions ``x`` after ``past`` (None: none), and every position's keys and values."""
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        if documents is not None:
            y = document_attention(q, k, v, documents, dropout_p=p)
        elif past is None:  # training, or the prompt
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
            total = k.shape[2]
            mask = None if t == 1 else torch.ones(t, total, dtype=torch.bool, device=x.device).tril(total - t)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.proj(y.transpose(1, 2).reshape(b, t, c)), (k, v)


class MLPBlock(nn.Module):
    def __init__(self, n_embd: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """One pre-norm transformer layer: the unit ``compile.scope=blocks`` compiles."""

    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout, bias)
        self.ln2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = MLPBlock(n_embd, dropout, bias)

    def forward(self, x: torch.Tensor, documents: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), documents)
        return x + self.mlp(self.ln2(x))

    def decode(self, x: torch.Tensor, past: KV | None) -> tuple[torch.Tensor, KV]:
        """``forward`` with the attention's ``decode``: the output, and the layer's keys and values."""
        attended, kv = self.attn.decode(self.ln1(x), past)
        x = x + attended
        return x + self.mlp(self.ln2(x)), kv


class GPT(nn.Module):
    """Byte-level GPT."""

    def __init__(self, vocab_size: int = 256, n_layer: int = 4, n_head: int = 4, n_embd: int = 128,
                 block_size: int = 256, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, dropout, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)

    @staticmethod
    def input_vocabulary(vocab_size: int = 256, **_: Any) -> Embedding:
        """How many token ids the model embeds (the vocabulary check compares the data's ids with it)."""
        return Embedding(vocab_size, f"model.vocab_size={vocab_size}", "model.vocab_size")

    @staticmethod
    def packing_refusal(**_: Any) -> str | None:
        """Why this model cannot train on packed rows (None: it can: position ids and a document mask)."""
        return None

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def output_layer(self) -> nn.Linear:
        """The linear layer that turns the last hidden states into logits (its weight is the embedding's)."""
        return self.head

    def forward(self, idx: torch.Tensor | PackedInputs, return_hidden: bool = False) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]``; with ``return_hidden``, the head's input ``[batch, seq, n_embd]``."""
        documents = None
        if isinstance(idx, PackedInputs):
            dropout = self.drop.p if self.training else 0.0
            ids, pos = idx.input_ids, idx.position_ids
            documents = layer_documents(idx.document_ids, dropout, idx.parent_ids)
        else:
            ids, pos = idx, torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok_emb(ids) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x) if documents is None else block(x, documents)
        x = self.ln_f(x)
        return x if return_hidden else self.head(x)

    def decode(self, idx: torch.Tensor, cache: KVCache, last_only: bool = False) -> torch.Tensor:
        """Logits ``[batch, t, vocab]`` of positions ``idx`` after those in ``cache``; it then holds theirs too."""
        start, t = cache.length, idx.shape[1]
        if start + t > self.block_size:
            raise ValueError(f"{start} cached + {t} new positions exceed block_size={self.block_size}")
        # Inside a wrapper too: offload=checkpoint leaves torch's checkpoint wrapper around each block after the fit.
        blocks = [m for m in self.blocks.modules() if isinstance(m, Block)]
        if not cache.layers:
            cache.layers = [None] * len(blocks)
        pos = torch.arange(start, start + t, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for i, block in enumerate(blocks):
            x, cache.layers[i] = block.decode(x, cache.layers[i])
        return self.head(self.ln_f(x[:, -1:] if last_only else x))
