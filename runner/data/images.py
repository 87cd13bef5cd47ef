"""Images for image classifiers: a local folder in torchvision's ``ImageFolder`` layout, or synthetic images when no
folder is given. PIL and torch only (no torchvision): the data works wherever runner does."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from runner.data.sequences.padding import seeded_loader
from runner.data.summary import SplitData
from runner.data.traits import CLASSES, DataTraits

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")


def image_folder(root: Path) -> tuple[list[tuple[Path, int]], list[str]]:
    """``(file, class id)`` for every image under ``root``'s class subdirectories, and the class names (sorted)."""
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    items = [(f, i) for i, c in enumerate(classes) for f in sorted((root / c).rglob("*"))
             if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file()]
    return items, classes


def split_folders(root: Path) -> tuple[Path, Path] | None:
    """``(train, val)`` when ``root`` holds both as subdirectories, else None."""
    train, val = root / "train", root / "val"
    return (train, val) if train.is_dir() and val.is_dir() else None


class FolderImages(Dataset[tuple[torch.Tensor, int]]):
    """Image files read with PIL, resized and normalized."""

    def __init__(self, items: Sequence[tuple[Path, int]], image_size: int, mean: Sequence[float],
                 std: Sequence[float]) -> None:
        self.items, self.image_size = list(items), image_size
        self.mean = torch.tensor(mean).view(3, 1, 1)
        self.std = torch.tensor(std).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        path, label = self.items[i]
        with Image.open(path) as img:
            rgb = img.convert("RGB").resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
            pixels = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8)
        x = pixels.view(self.image_size, self.image_size, 3).permute(2, 0, 1).float() / 255.0
        return (x - self.mean) / self.std, label


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """``n`` images of ``num_classes`` classes, each drawn from the seed and its index alone."""

    def __init__(self, n: int, image_size: int, num_classes: int, seed: int, offset: int = 0) -> None:
        self.n, self.image_size, self.num_classes, self.seed, self.offset = n, image_size, num_classes, seed, offset
        g = torch.Generator().manual_seed(seed)
        coarse = torch.randn(num_classes, 3, 4, 4, generator=g)
        self.patterns = F.interpolate(coarse, size=(image_size, image_size), mode="bilinear", align_corners=False)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        index = self.offset + i
        label = index % self.num_classes
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        # The class's pattern, weaker or stronger, over another class's at most as strong, and noise: learnable
        # (the label's pattern dominates) but not to a loss of 0 (when the two weigh nearly the same).
        other = int(torch.randint(self.num_classes, (1,), generator=g))
        own, mixed = torch.rand(2, generator=g).tolist()
        noise = torch.randn(3, self.image_size, self.image_size, generator=g)
        weight = 0.5 + 0.5 * own
        return weight * self.patterns[label] + mixed * weight * self.patterns[other] + noise, label


class ImageDataModule(SplitData):
    """Images from ``path`` (``ImageFolder`` layout) or synthetic ones; batches ``(images, labels)`` with images
    ``[batch, 3, image_size, image_size]``, every batch the same shape."""

    def __init__(self, path: str | None = None, image_size: int = 64, num_classes: int = 10, num_samples: int = 2048,
                 batch_size: int = 32, val_fraction: float = 0.1, seed: int = 0, num_workers: int = 0,
                 mean: Sequence[float] = (0.485, 0.456, 0.406), std: Sequence[float] = (0.229, 0.224, 0.225)) -> None:
        super().__init__()
        self.path, self.image_size, self.num_classes, self.num_samples = path, image_size, num_classes, num_samples
        self.batch_size, self.val_fraction, self.seed, self.num_workers = batch_size, val_fraction, seed, num_workers
        self.mean, self.std = tuple(mean), tuple(std)
        self.classes: list[str] = []
        self._train: Dataset | None = None
        self._val: Dataset | None = None

    @staticmethod
    def check_arguments(path: str | None = None, num_classes: int = 10, batch_size: int = 32, **_: Any) -> str | None:
        """What is wrong with these arguments, in one paragraph, before anything is written (None: nothing)."""
        if path is None or not Path(path).expanduser().exists():
            return None  # synthetic, or a missing path (named by the existence check)
        root = Path(path).expanduser()
        split = split_folders(root)
        items, classes = image_folder(split[0] if split else root)
        layout = ("ImageFolder layout: one subdirectory per class holding its images (ROOT/cat/1.png), "
                  "optionally under ROOT/train and ROOT/val")
        if not classes or not items:
            return (f"data.path={path} holds no images in the {layout}. Point data.path at such a folder, or drop "
                    "it for synthetic images.")
        if len(classes) > num_classes:
            return (f"data.path={path} has {len(classes)} classes ({', '.join(classes[:8])}...) but data.num_classes="
                    f"{num_classes}: set data.num_classes={len(classes)} (the model's num_classes follows it).")
        if len(items) < batch_size:
            return f"data.path={path} holds {len(items)} images, fewer than data.batch_size={batch_size}: lower it."
        return None

    @staticmethod
    def traits(**_: Any) -> DataTraits:
        """Accuracy; every batch the same shape."""
        return CLASSES

    def check(self) -> None:
        """Fail fast (before any model is built) if the folder is missing."""
        if self.path is not None and not Path(self.path).expanduser().is_dir():
            raise FileNotFoundError(f"data.path={self.path} is not a directory of images (ImageFolder layout).")

    def setup(self, stage: str | None = None) -> None:
        if self._train is not None:
            return
        if self.path is None:
            n_val = max(self.batch_size, round(self.num_samples * self.val_fraction))
            self._train = SyntheticImages(self.num_samples - n_val, self.image_size, self.num_classes, self.seed)
            self._val = SyntheticImages(n_val, self.image_size, self.num_classes, self.seed,
                                        offset=self.num_samples - n_val)
            self.classes = [str(c) for c in range(self.num_classes)]
            return
        root = Path(self.path).expanduser()
        split = split_folders(root)
        if split is not None:
            train, self.classes = image_folder(split[0])
            val, _ = image_folder(split[1])
        else:
            items, self.classes = image_folder(root)
            random.Random(self.seed).shuffle(items)
            n_val = max(1, round(len(items) * self.val_fraction))
            val, train = items[:n_val], items[n_val:]
        self._train = FolderImages(train, self.image_size, self.mean, self.std)
        self._val = FolderImages(val, self.image_size, self.mean, self.std)

    def _loader(self, ds: Dataset, shuffle: bool) -> DataLoader:
        # Every batch full, validation's too (when there is one): one shape, one graph.
        full = len(ds) >= self.batch_size  # type: ignore[arg-type]
        return seeded_loader(ds, self.batch_size, self.seed, self.num_workers, shuffle, drop_last=full)
