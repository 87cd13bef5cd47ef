"""Causal attention that never crosses examples, from the ``document_ids`` of a packed batch."""

# Every mask is built from document_ids inside the compiled graph (shapes fixed by the row length, no host read), so
# one graph, CUDA-graphed too, serves every pack. FlexAttention where it can; SDPA with a dense mask on the CPU (torch
# 2.13's FlexAttention has no backward there), uncompiled, and with dropout. Both give the unpacked loss
# (tests/test_packing_exact.py).

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

BLOCK = 128  # FlexAttention's block size (its default): the granularity at which whole blocks of keys are skipped


def dense_document_mask(document_ids: torch.Tensor, parent_ids: torch.Tensor | None = None) -> torch.Tensor:
    """``[batch, 1, seq, seq]``, True where a query (row) may attend to a key (column): the key is not after it and
    belongs to the same example, or to the query's parent (``parent_ids``: a prefix shared by several examples, such as
    a preference pair's prompt; None: every example its own parent)."""
    t = document_ids.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=document_ids.device).tril()
    same = document_ids[:, :, None] == document_ids[:, None, :]
    if parent_ids is not None:
        same = same | (parent_ids[:, :, None] == document_ids[:, None, :])
    return (same & causal)[:, None]


def additive_document_mask(document_ids: torch.Tensor, dtype: torch.dtype,
                           parent_ids: torch.Tensor | None = None) -> torch.Tensor:
    """``dense_document_mask`` as the additive mask attention implementations that add theirs take: 0 where attended,
    the dtype's lowest value elsewhere."""
    allowed = dense_document_mask(document_ids, parent_ids)
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed,
                                                                                      torch.finfo(dtype).min)


def block_document_mask(document_ids: torch.Tensor, block: int = BLOCK,
                        parent_ids: torch.Tensor | None = None) -> Any:
    """The FlexAttention ``BlockMask`` of causal attention within each example, and into each query's parent."""
    # Block tables from each block's first and last example: O(batch x blocks^2) integer work, no
    # create_block_mask (it evaluates the mask at every position, 0.15-0.30 s a call: pytorch issue 151043).
    from torch.nn.attention.flex_attention import BlockMask

    parents = document_ids if parent_ids is None else parent_ids
    b, t = document_ids.shape
    n = -(-t // block)
    index = torch.arange(n, device=document_ids.device)
    ends = torch.clamp(index * block + block, max=t) - 1
    first, last = document_ids[:, index * block], document_ids[:, ends]
    first_parent, last_parent = parents[:, index * block], parents[:, ends]
    on_or_below = index[:, None] >= index[None, :]  # [query block, key block]
    below = index[:, None] > index[None, :]
    touches = on_or_below & (last[:, None, :] >= first_parent[:, :, None])
    one_key = (first == last)[:, None, :]
    one_query = ((first == last) & (first_parent == last_parent))[:, :, None]
    seen = (first[:, None, :] == first[:, :, None]) | (first[:, None, :] == first_parent[:, :, None])
    full = below & one_key & one_query & seen

    def tables(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = blocks.sum(-1, dtype=torch.int32)[:, None]
        order = torch.argsort(blocks.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
        return counts, order[:, None]

    def same_example(batch: Any, head: Any, q: Any, k: Any) -> Any:
        key = document_ids[batch, k]
        return ((document_ids[batch, q] == key) | (parents[batch, q] == key)) & (q >= k)

    partial_num, partial_idx = tables(touches & ~full)
    full_num, full_idx = tables(full)
    return BlockMask.from_kv_blocks(partial_num, partial_idx, full_num, full_idx, BLOCK_SIZE=block,
                                    mask_mod=same_example, seq_lengths=(t, t))


def uses_flex(query: torch.Tensor, dropout_p: float = 0.0) -> bool:
    """Whether ``document_attention`` runs FlexAttention for ``query``: on CUDA, inside a compiled graph, without
    dropout."""
    # is_compiling is a constant to Dynamo: the graph holds one kernel
    return query.is_cuda and dropout_p == 0.0 and torch.compiler.is_compiling()


def layer_documents(document_ids: torch.Tensor, dropout_p: float = 0.0,
                    parent_ids: torch.Tensor | None = None) -> torch.Tensor:
    """What a model hands each of its layers for ``document_attention``: ``document_ids`` where FlexAttention runs (with
    ``parent_ids``: both stacked, ``[2, batch, seq]``), else the dense mask, built once for every layer (``O(batch x
    seq^2)`` to build)."""
    if not uses_flex(document_ids, dropout_p):
        return dense_document_mask(document_ids, parent_ids)
    return document_ids if parent_ids is None else torch.stack([document_ids, parent_ids])


def document_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, documents: torch.Tensor,
                       dropout_p: float = 0.0) -> torch.Tensor:
    """Causal attention of ``q``, ``k``, ``v`` (``[batch, heads, seq, head_dim]``) within each example: ``documents`` is
    the examples' ``document_ids`` (``[batch, seq]``; ``[2, batch, seq]``: with their parents), or the dense mask
    already built from them."""
    if documents.dtype == torch.bool:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=documents, dropout_p=dropout_p)
    ids, parents = (documents[0], documents[1]) if documents.dim() == 3 else (documents, None)
    if uses_flex(q, dropout_p):
        from torch.nn.attention.flex_attention import flex_attention

        out = flex_attention(q, k, v, block_mask=block_document_mask(ids, parent_ids=parents))
        return out  # type: ignore[return-value]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=dense_document_mask(ids, parents), dropout_p=dropout_p)
