"""DPO's references: precomputed log-probabilities are cached under a key of everything they depend on (each part
changed changes the key); the adapter's base is keyed without the adapter; a frozen copy stays out of the state dict
and the optimizer but moves and casts with the module; a checkpoint refuses a reference rebuilt from other weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.config.schema.objective import Loss, ObjectiveConfig
from runner.config.schema.peft import PeftConfig, PeftMethod
from runner.data.preference import PreferenceDataModule
from runner.models.hf import CausalLM
from runner.peft import apply_peft
from runner.training.preference import CHECKPOINT_KEY, PreferenceModule
from runner.training.reference import FrozenCopy, Precomputed
from tests.hf_models import save_tokenizer

ROOT = Path(__file__).resolve().parents[1]
ROWS = [json.loads(line) for line in (ROOT / "examples" / "data" / "preference.jsonl").read_text().splitlines()[:60]]


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return CausalLM("llama", overrides=dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                            num_attention_heads=2, max_position_embeddings=256))


def _table(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _key(model: torch.nn.Module, path: Path, precision: str = "32-true", **data: Any) -> str:
    module = PreferenceDataModule(str(path), **{"seq_len": 128, "batch_size": 4, **data})
    module.setup()
    reference = Precomputed(model, precision, str(path.parent / "cache"), base_only=False)
    return reference.path(module.reference_key(), "train").name


def test_the_cache_key_changes_with_everything_the_log_probabilities_depend_on(tmp_path: Path) -> None:
    table = _table(tmp_path / "pairs.jsonl", ROWS)
    model = _model()
    base = _key(model, table)
    assert _key(model, table) == base  # the same inputs: the same key (a second run reads the cache)
    save_tokenizer(tmp_path / "tok")
    other_rows = [*ROWS[:-1], {**ROWS[-1], "rejected": "something else"}]
    changed = {
        "weights": _key(_model(seed=1), table),
        "tokenizer": _key(model, table, tokenizer=str(tmp_path / "tok")),
        "template": _key(model, table, prompt_template="Q: {prompt}\nA: "),
        "data": _key(model, _table(tmp_path / "changed.jsonl", other_rows)),
        "lengths": _key(model, table, seq_len=64),
        "rows read": _key(model, table, max_examples=50),
        "split": _key(model, table, val_fraction=0.2),
        "precision": _key(model, table, precision="bf16-mixed"),
    }
    assert all(key != base for key in changed.values()), [name for name, key in changed.items() if key == base]
    assert len(set(changed.values())) == len(changed)


def test_the_adapter_s_base_is_keyed_without_the_adapter() -> None:
    def digest(seed: int, lora_seed: int, base_only: bool) -> str:
        model = _model(seed)
        torch.manual_seed(lora_seed)
        apply_peft(model, PeftConfig(method=PeftMethod.lora, r=4, alpha=8))
        return Precomputed(model, "32-true", None, base_only=base_only).digest

    assert digest(0, 1, True) == digest(0, 2, True)  # a new adapter (B = 0) is not part of the reference
    assert digest(0, 1, True) != digest(1, 1, True)  # the base is
    assert digest(0, 1, False) != digest(0, 2, False)  # an adapter loaded from peft.path is


def test_a_frozen_copy_is_outside_the_state_and_the_optimizer_but_moves_with_the_module() -> None:
    model = _model()
    module = PreferenceModule(model, torch.optim.AdamW, ObjectiveConfig(loss=Loss.dpo), FrozenCopy(model))
    assert all(k.startswith("model.") for k in module.state_dict())
    held = {id(p) for g in module.configure_optimizers().param_groups for p in g["params"]}  # type: ignore[union-attr]
    assert held == {id(p) for p in model.parameters()}
    module.to(torch.float64)
    frozen = module.reference.frozen  # type: ignore[union-attr]
    assert all(p.dtype == torch.float64 and not p.requires_grad for p in frozen.parameters())
    size = sum(p.numel() * 8 for p in frozen.parameters()) + sum(b.numel() * b.element_size() for b in frozen.buffers())
    assert module.figures()["objective/reference_bytes"] == size


def test_a_checkpoint_refuses_a_reference_rebuilt_from_other_weights() -> None:
    model = _model()
    module = PreferenceModule(model, torch.optim.AdamW, ObjectiveConfig(loss=Loss.dpo), FrozenCopy(model))
    checkpoint: dict[str, Any] = {}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint[CHECKPOINT_KEY] == module.reference.digest
    module.on_load_checkpoint(checkpoint)  # the same reference: fine
    other = _model(seed=1)
    rebuilt = PreferenceModule(other, torch.optim.AdamW, ObjectiveConfig(loss=Loss.dpo), FrozenCopy(other))
    with pytest.raises(RuntimeError, match="the reference this run trained against is not the one"):
        rebuilt.on_load_checkpoint(checkpoint)
