"""A small decoder-only transformer in the spirit of nanoGPT: the whole model on one screen. ``forward(idx)`` takes byte
ids ``[batch, seq]`` and returns logits ``[batch, seq, vocab]``."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runner.config.target_objects import Embedding
from runner.packing import PackedInputs, document_attention, layer_documents

KV = tuple[torch.Tensor, torch.Tensor]  # One layer's cached keys and values, each ``[batch, n_head, length, head_dim]``


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
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        if documents is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            y = document_attention(q, k, v, documents, dropout_p=p)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def decode(self, x: torch.Tensor, kv: KV, at: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``forward`` for the positions ``at`` of ``x``, their keys and values written into ``kv`` first; ``allowed``
        ``[batch, 1, len(at), length]``: the cached positions each one attends to."""
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        kv[0].index_copy_(2, at, k)
        kv[1].index_copy_(2, at, v)
        y = F.scaled_dot_product_attention(q, kv[0], kv[1], attn_mask=allowed)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


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

    def decode(self, x: torch.Tensor, kv: KV, at: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``forward`` with the attention's ``decode``."""
        x = x + self.attn.decode(self.ln1(x), kv, at, allowed)
        return x + self.mlp(self.ln2(x))


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

    def blocks_inside(self) -> list[Block]:
        """The blocks, inside a wrapper too: offload=checkpoint leaves torch's checkpoint wrapper around each."""
        return [m for m in self.blocks.modules() if isinstance(m, Block)]

    def new_cache(self, batch: int, length: int) -> list[KV]:
        """Keys and values of ``length`` positions for each block, for ``decode``."""
        attn = self.blocks_inside()[0].attn
        shape = (batch, attn.n_head, length, self.tok_emb.embedding_dim // attn.n_head)
        weight = self.tok_emb.weight
        return [(weight.new_zeros(shape), weight.new_zeros(shape)) for _ in self.blocks_inside()]

    def decode(self, idx: torch.Tensor, positions: torch.Tensor, at: torch.Tensor, allowed: torch.Tensor,
               cache: list[KV]) -> torch.Tensor:
        """The last position's logits ``[batch, vocab]`` after ``idx`` ``[batch, t]`` at ``positions`` (the position
        embeddings' index), written into ``cache`` at ``at``; ``allowed``: see ``CausalSelfAttention.decode``."""
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block, kv in zip(self.blocks_inside(), cache, strict=True):
            x = block.decode(x, kv, at, allowed)
        return self.head(self.ln_f(x[:, -1:]))[:, -1]  # the head on the last position alone
