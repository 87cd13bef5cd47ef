"""Typed schemas of the model families runner builds from other libraries, and their data: Hugging Face
``transformers`` (``model=hf_causal_lm``, ``model=hf_classifier``, ``data=text_classification``) and
``timm`` (``model=timm``, ``data=images``). Registered with the other open ``_target_`` nodes by
:mod:`runner.config.targets`; the libraries themselves are imported only when a model is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class HFCausalLMSchema:
    """Any transformers causal LM (``runner.models.hf.CausalLM``): by ``config`` (random weights) or ``path``."""

    _target_: str = "runner.models.hf.CausalLM"
    config: Optional[str] = "llama"
    """A model type (llama, gpt2, mistral, qwen2, ...) or its configuration class name (LlamaConfig): built
    with from_config, random weights, nothing downloaded."""
    path: Optional[str] = None
    """A local directory with a saved model and its tokenizer (from_pretrained, local files only). When
    given, the saved model's own configuration is used: ``config`` and ``overrides`` are not applied."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Settings of the configuration (hidden_size, num_hidden_layers, ...); a null value keeps the family's default."""
    attn_implementation: str = "sdpa"
    """transformers' attention kernel: sdpa (torch's scaled_dot_product_attention) or eager."""


@dataclass
class HFClassifierSchema:
    """Any transformers sequence classifier (``runner.models.hf.SequenceClassifier``), BERT-style."""

    _target_: str = "runner.models.hf.SequenceClassifier"
    config: Optional[str] = "bert"
    """A model type (bert, roberta, distilbert, ...) or its configuration class name: random weights."""
    path: Optional[str] = None
    """A local directory with a saved model and its tokenizer; it gets a head of ``num_labels`` classes."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Settings of the configuration; a null value keeps the family's default."""
    num_labels: int = 2
    """Classes of the head (the data's ``num_classes``)."""
    attn_implementation: str = "sdpa"


@dataclass
class TextClassificationDataSchema:
    """Labelled text, one padded variable-length batch at a time
    (``runner.data.classification.TextClassificationDataModule``)."""

    _target_: str = "runner.data.classification.TextClassificationDataModule"
    path: Optional[str] = None
    """A file, a folder or a glob of labelled rows: .jsonl/.json, .csv or .parquet tables, a save_to_disk folder,
    or text files of label<TAB>text lines. None: paragraphs of the Python stdlib source labelled by their package."""
    val_path: Optional[str] = None
    """Rows that validate, in data.path's forms; None: a seeded split of data.path's rows."""
    tokenizer: Optional[str] = "${oc.select:model.path,null}"
    """bytes (UTF-8 bytes, ids 1-256, 0 pads) or a directory holding a saved tokenizer. Default: the model's own
    (model.path), else bytes."""
    text_column: str = "text"
    """The column of text."""
    label_column: str = "label"
    """The column of labels: class ids (0, 1, ...) or class names (numbered in sorted order), one kind."""
    num_classes: int = 4
    """Classes the rows hold (the model's ``num_labels`` follows it); checked against the data before the run."""
    seq_len: int = 128
    """Longest sequence: longer texts are cut here."""
    min_len: int = 16
    """Shorter texts are dropped."""
    batch_size: int = 16
    max_examples: Optional[int] = 20_000
    """Read at most this many examples (None: all)."""
    val_fraction: float = 0.1
    seed: int = 0
    num_workers: int = 0



@dataclass
class TimmSchema:
    """A timm image classifier (``runner.models.image.ImageClassifier``)."""

    _target_: str = "runner.models.image.ImageClassifier"
    name: str = "resnet18"
    """A timm architecture: resnet18, convnext_tiny, efficientnet_b0, vit_tiny_patch16_224, ..."""
    num_classes: int = 10
    img_size: Optional[int] = None
    """Input size for models built for one (ViTs: their position embedding); null for CNNs."""
    pretrained: bool = False
    """True asks for downloaded weights, which an offline run refuses with the way to a local copy."""
    checkpoint_path: Optional[str] = None
    """A local weights file (.safetensors or .pth) loaded as timm loads pretrained weights."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Other arguments of the architecture (drop_rate, drop_path_rate, ...); null keeps its default."""


@dataclass
class ImageDataSchema:
    """Images from a local folder (torchvision's ImageFolder layout) or synthetic ones
    (``runner.data.images.ImageDataModule``)."""

    _target_: str = "runner.data.images.ImageDataModule"
    path: Optional[str] = None
    """ROOT/CLASS/IMAGE (optionally under ROOT/train and ROOT/val); None: synthetic images."""
    image_size: int = 64
    num_classes: int = 10
    num_samples: int = 2048
    """Synthetic images: how many (train and val)."""
    batch_size: int = 32
    val_fraction: float = 0.1
    seed: int = 0
    num_workers: int = 0
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])
