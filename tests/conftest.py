"""Shared fixtures: a clean Dynamo between tests, GPU tests skipped without CUDA, tiny configs."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
# The MFU peak probe caches per machine; tests (and the processes they start) keep theirs out of ~/.cache.
os.environ.setdefault("RUNNER_CACHE_DIR", tempfile.mkdtemp(prefix="runner-test-cache-"))
# datasets' cache (prepared tables, runner's token ids) too: tests never read or fill ~/.cache/huggingface.
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="runner-test-datasets-"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (gpu marker)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test starts with empty compile caches, counters and default stance."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()
