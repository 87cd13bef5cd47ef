"""Packed sequences: examples laid end to end in rows of one length, and attention that never crosses them.

- :class:`PackedInputs`: what a packed batch gives the model (token ids, position ids restarting per example,
  and which example each position belongs to);
- :func:`best_fit_decreasing`: which examples share a row;
- :func:`document_attention` and the masks it uses: causal attention within each example only, built inside the
  compiled graph from ``document_ids`` (fixed shapes for a fixed row length, so one graph serves every pack).

torch only: the data modules and the models both import it (neither imports the other).
"""

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
