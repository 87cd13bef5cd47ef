"""Packed sequences: examples laid end to end in rows of one length, and attention that never crosses them."""

from runner.packing.attention import BLOCK as BLOCK
from runner.packing.attention import additive_document_mask as additive_document_mask
from runner.packing.attention import block_document_mask as block_document_mask
from runner.packing.attention import dense_document_mask as dense_document_mask
from runner.packing.attention import document_attention as document_attention
from runner.packing.attention import layer_documents as layer_documents
from runner.packing.attention import uses_flex as uses_flex
from runner.packing.bins import best_fit_decreasing as best_fit_decreasing
from runner.packing.inputs import PackedInputs as PackedInputs
