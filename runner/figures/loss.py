"""The loss: ``loss/*``, whether a causal LM's cross-entropy was computed from its whole logits or a chunk of
positions at a time (``loss.chunked``, docs/large-vocab.md), and why.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

LOSS_CHUNKED = define("loss/chunked", "whether the loss was computed a chunk of positions at a time from the last "
                      "hidden states and the output layer's weight (true) or from the whole logits (false)",
                      label="chunked loss")
LOSS_CHUNKS = define("loss/chunks", "chunks a full step's positions were cut into (a chunked loss only)",
                     label="loss chunks")
LOSS_CHUNK_ROWS = define("loss/chunk_rows", "positions per chunk of the chunked loss", label="positions per chunk")
LOSS_REASON = define("loss/reason", "why the loss was chunked or not: loss.chunked and what the run found",
                     label="loss computed")
LOSS_LOGITS_GIB = define("loss/logits_gib", "one float32 copy of a full step's logits [positions x vocabulary] in "
                         "GiB: what an unchunked loss holds, twice with its gradient", label="a step's logits [GiB]")
