"""timm image classifiers as runner models: ``model.name`` (``resnet18``, ``vit_tiny_patch16_224``, ...) built with
random weights, or with weights from a local checkpoint file; nothing is downloaded."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

_INSTALL = ("in runner's checkout, `make run-vision RECIPE=resnet_tiny` (or vit_tiny, with ARGS=...) trains in a "
            "venv of PyPI's torch and torchvision; elsewhere pip install 'runner[vision]' with a torchvision built for "
            "this torch (docs/vision.md: PyPI's torch and torchvision pair up; a CPU-only torch needs the CPU "
            "torchvision of download.pytorch.org)")


class ImageClassifier(nn.Module):
    """A timm model by name, with ``num_classes`` outputs; ``img_size`` for models that take it (ViTs)."""

    def __init__(self, name: str = "resnet18", num_classes: int = 10, img_size: int | None = None,
                 pretrained: bool = False, checkpoint_path: str | None = None,
                 overrides: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        import timm

        kwargs = {str(k): v for k, v in dict(overrides or {}).items() if v is not None}
        if img_size is not None:
            kwargs["img_size"] = img_size
        # pretrained=true is refused by the check (runs are offline): weights come from checkpoint_path only,
        # loaded as timm loads pretrained weights (a classifier of another size is left at random).
        if checkpoint_path:
            kwargs.update(pretrained=True, pretrained_cfg_overlay={"file": str(Path(checkpoint_path).expanduser())})
        self.model = timm.create_model(name, num_classes=num_classes, **kwargs)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)

    @staticmethod
    def check_arguments(name: str = "resnet18", pretrained: bool = False, checkpoint_path: str | None = None,
                        **_: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before anything is written (None: nothing)."""
        try:
            import timm
        except Exception as e:  # ImportError, or torchvision failing to import beside this torch
            return (f"model=timm needs timm, which does not import ({type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''}, torch {torch.__version__}): {_INSTALL}.")
        if not timm.is_model(name):
            names = timm.list_models()
            matches = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
            hint = f"did you mean {' or '.join(f'model.name={m}' for m in matches)}? " if matches else ""
            return (f"model.name={name} is not a timm {timm.__version__} model: {hint}timm has {len(names)} "
                    "architectures (e.g. resnet18, resnet50, convnext_tiny, efficientnet_b0, vit_tiny_patch16_224, "
                    "deit_tiny_patch16_224); list them with "
                    "`python -c \"import timm; print(timm.list_models('resnet*'))\"`.")
        if pretrained:
            return _offline_weights(name)
        if checkpoint_path and not Path(checkpoint_path).expanduser().is_file():
            return (f"model.checkpoint_path={checkpoint_path} is not a file. Give a local checkpoint of {name} "
                    "(a .safetensors or .pth state dict), or drop it for random weights.")
        return None


def _offline_weights(name: str) -> str:
    """``model.pretrained=true``: runs are offline; where a local copy is, or how to make one."""
    import timm

    try:
        hub_id = timm.models.get_pretrained_cfg(name).hf_hub_id  # type: ignore[union-attr]
    except Exception:
        hub_id = None
    hub_id = hub_id or f"timm/{name}"
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(hub_id, "model.safetensors")
        cached = found if isinstance(found, str) else None
    except Exception:
        cached = None
    where = (f"This machine's Hugging Face cache holds them: give model.checkpoint_path={cached}." if cached else
             f"Download them where there is network (`hf download {hub_id} model.safetensors --local-dir DIR`), "
             "copy DIR here, and give model.checkpoint_path=DIR/model.safetensors.")
    return (f"model.pretrained=true asks timm to download {name}'s weights ({hub_id} on the Hugging Face Hub), "
            f"but runner builds models offline: nothing is downloaded during a run. {where} Or train from random "
            "weights (model.pretrained=false).")
