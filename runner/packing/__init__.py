"""Packed sequences: examples laid end to end in rows of one length, and attention that never crosses them."""

from runner.packing.attention import (
    BLOCK,
    additive_document_mask,
    block_document_mask,
    dense_document_mask,
    document_attention,
    layer_documents,
    uses_flex,
)
from runner.packing.bins import best_fit_decreasing
from runner.packing.inputs import PackedInputs

__all__ = ["BLOCK", "PackedInputs", "additive_document_mask", "best_fit_decreasing", "block_document_mask",
           "dense_document_mask", "document_attention", "layer_documents", "uses_flex"]
