"""Typed schemas of the model families from other libraries: ``transformers`` (``model=hf_causal_lm``,
``model=hf_classifier``) and ``timm`` (``model=timm``), whose libraries are imported only when a model is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class HFCausalLMSchema:
    """Any transformers causal LM (``runner.models.hf.CausalLM``): by ``config`` (random weights) or ``path``."""

    _target_: str = "runner.models.hf.CausalLM"
    # A model type (llama, gpt2, mistral, qwen2, ...) or its configuration class name (LlamaConfig): built with
    # from_config, random weights, nothing downloaded.
    config: Optional[str] = "llama"
    # A local directory with a saved model and its tokenizer (from_pretrained, local files only). When given, the saved
    # model's own configuration is used: config and overrides are not applied.
    path: Optional[str] = None
    # Settings of the configuration (hidden_size, num_hidden_layers, ...); a null value keeps the family's default.
    overrides: dict[str, Any] = field(default_factory=dict)
    # transformers' attention kernel: sdpa (torch's scaled_dot_product_attention) or eager.
    attn_implementation: str = "sdpa"


@dataclass
class HFClassifierSchema(HFCausalLMSchema):
    """Any transformers sequence classifier (``runner.models.hf.SequenceClassifier``), BERT-style: the causal LM's
    settings, and a head of ``num_labels`` classes (a saved model at ``path`` gets one too)."""

    _target_: str = "runner.models.hf.SequenceClassifier"
    config: Optional[str] = "bert"  # A model type (bert, roberta, distilbert, ...) or its configuration class name.
    num_labels: int = 2  # Classes of the head (the data's num_classes).


@dataclass
class TimmSchema:
    """A timm image classifier (``runner.models.image.ImageClassifier``)."""

    _target_: str = "runner.models.image.ImageClassifier"
    name: str = "resnet18"  # A timm architecture: resnet18, convnext_tiny, efficientnet_b0, vit_tiny_patch16_224, ...
    num_classes: int = 10
    # Input size for models built for one (ViTs: their position embedding); null for CNNs.
    img_size: Optional[int] = None
    # True asks for downloaded weights, which an offline run refuses with the way to a local copy.
    pretrained: bool = False
    # A local weights file (.safetensors or .pth) loaded as timm loads pretrained weights.
    checkpoint_path: Optional[str] = None
    # Other arguments of the architecture (drop_rate, drop_path_rate, ...); null keeps its default.
    overrides: dict[str, Any] = field(default_factory=dict)
