"""What a data module's batches are, declared by the data module itself: what validation reports beside its loss,
whether each batch is padded to its longest sequence, and whether batch shapes can change.

A data module class declares them in a static method ``traits(**fields) -> DataTraits``, from the same fields
its config node holds (``TextDataModule``: bits per byte on bytes, none on a tokenizer's ids; padded and varying
shapes in documents batching). The builders read them (``runner.build.data_traits``) instead of switching on the
config's type; a data module of a user's own that declares nothing gets ``DataTraits()``: no extra metric, no
padding rule, shapes that may vary.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ValMetric(Enum):
    """What validation reports beside its loss: it depends on what the targets are."""

    bits_per_byte = "bits_per_byte"  # byte-level text: the loss in bits per byte (val/bpb)
    accuracy = "accuracy"  # classes: the share of targets predicted (val/accuracy)
    none = "none"  # anything else (tokens of a tokenizer: a loss per token, not per byte)


@dataclass(frozen=True)
class DataTraits:
    """What a data module's batches are (module docstring)."""

    val_metric: ValMetric = ValMetric.none
    pads_per_batch: bool = False
    """Each batch is padded to its longest sequence: the shape policy's padding rule (``pad_to``) applies."""
    shapes_vary: bool = True
    """Batch shapes can differ between steps or ranks (what the shape policies and rank agreement are for)."""
    pairs: bool = False
    """Batches hold preference pairs (``runner.data.preference.batch``): what a preference objective trains on."""


CLASSES = DataTraits(ValMetric.accuracy, pads_per_batch=False, shapes_vary=False)
"""Fixed-shape batches of class labels (images, synthetic features)."""
