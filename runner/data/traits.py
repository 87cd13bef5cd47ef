"""What a data module's batches are, declared by the data module itself: what validation reports beside its loss,
whether each batch is padded to its longest sequence, and whether batch shapes can change."""

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
    """What a data module's batches are."""

    val_metric: ValMetric = ValMetric.none
    # Each batch is padded to its longest sequence: the shape policy's padding rule (``pad_to``) applies
    pads_per_batch: bool = False
    # Batch shapes can differ between steps or ranks (what the shape policies and rank agreement are for)
    shapes_vary: bool = True
    # Batches hold preference pairs (``runner.data.preference.batch``): what a preference objective trains on
    pairs: bool = False


# Fixed-shape batches of class labels (images, synthetic features)
CLASSES = DataTraits(ValMetric.accuracy, pads_per_batch=False, shapes_vary=False)
