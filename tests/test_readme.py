"""The README's own-Trainer example runs exactly as written (real Inductor compile)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    section = README.read_text().split("## Using the strategy in your own Trainer", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README lost its CompileStrategy example"
    return match.group(1)


@pytest.mark.slow
def test_readme_example_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real importable file: Dynamo resolves a compiled function's module by name.
    (tmp_path / "readme_example.py").write_text(_example())
    monkeypatch.chdir(tmp_path)  # Lightning writes lightning_logs/ into the working directory
    monkeypatch.syspath_prepend(str(tmp_path))
    example = importlib.import_module("readme_example")
    trainer = example.trainer
    assert trainer.global_step == 50
    assert trainer.strategy.stack.figures()["compile/scope"] == "step"
    assert float(trainer.callback_metrics["loss"]) > 0
