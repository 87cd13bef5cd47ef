"""Packed rows for transformers causal LMs: which families take them, and the mask each attention kernel takes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from runner.packing import additive_document_mask, block_document_mask, dense_document_mask

# transformers model types whose packed loss equals their unpacked loss (the Llama family's layout)
PACKING_FAMILIES = ("llama", "qwen2", "qwen3")
PACKING_ATTENTION = ("sdpa", "eager", "flex_attention")


def family_of(config: str | None, path: str | None) -> str | None:
    """The model type a ``CausalLM`` is built as: a saved model's ``config.json``, else ``config``'s type."""
    if path:
        try:
            return json.loads((Path(path).expanduser() / "config.json").read_text()).get("model_type")
        except (OSError, ValueError):
            return None
    if config:
        from runner.models.hf_checks import model_type

        return model_type(config)
    return None


def packing_refusal(config: str | None, path: str | None, overrides: Mapping[str, Any],
                    attn_implementation: str) -> str | None:
    """Why this transformers model cannot train on packed rows, in one paragraph (None: it can)."""
    kind = family_of(config, path)
    what = f"model.path={path}" if path else f"model.config={config}"
    if kind not in PACKING_FAMILIES:
        return (f"data.packing=true with {what} ({kind or 'an unknown model type'}): runner packs examples only for "
                "models whose attention takes its document mask and position ids, checked against the unpacked "
                f"loss: runner's GPT (model=gpt) and transformers' {', '.join(PACKING_FAMILIES)} (model=hf_causal_lm "
                "model.config=llama). Use one of those, or drop data.packing (padded batches).")
    if overrides.get("use_sliding_window") or overrides.get("sliding_window"):
        return (f"data.packing=true with {what} and a sliding window (model.overrides): the document mask runner "
                "passes is the whole causal mask, without the window. Drop the sliding window, or data.packing.")
    if attn_implementation not in PACKING_ATTENTION:
        return (f"data.packing=true with model.attn_implementation={attn_implementation}: that kernel takes no "
                f"document mask. Use one that does: {', '.join(PACKING_ATTENTION)} (model.attn_implementation=sdpa).")
    return None


def document_mask(attn_implementation: str, document_ids: torch.Tensor, dtype: torch.dtype,
                  parent_ids: torch.Tensor | None = None) -> Any:
    """The attention mask of a packed batch for ``attn_implementation`` (``parent_ids``: the prefix each attends to)."""
    if attn_implementation == "flex_attention":
        return block_document_mask(document_ids, parent_ids=parent_ids)
    if attn_implementation == "sdpa":
        return dense_document_mask(document_ids, parent_ids)
    return additive_document_mask(document_ids, dtype, parent_ids)
