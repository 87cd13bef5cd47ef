"""Every group option and every recipe composes, converts to typed objects and validates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner.config import CONF_DIR, ConfigError, RunConfig, compose, load, recipes
from runner.config.schema import Scope
from tests.hf_models import refused_without_vision, saved_llama

GROUPS = ["model", "data", "optimizer", "scheduler", "compile", "dynamic", "offload", "cudagraphs", "trainer",
          "telemetry", "logger", "reliability", "objective"]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _pairs() -> list[tuple[str, str]]:
    return [(g, o) for g in GROUPS for o in _options(g)]


def _extra_for(group: str, option: str) -> list[str]:
    # Options that only make sense with a partner are composed with it.
    if group == "model" and option == "mlp":
        return ["data=synthetic"]
    if group == "data" and option == "synthetic":
        return ["model=mlp"]
    if group == "model" and option == "custom":
        return ["model._target_=torch.nn.Linear", "+model.in_features=4", "+model.out_features=4"]
    if (group, option) in (("model", "hf_classifier"), ("data", "text_classification")):
        return ["model=hf_classifier", "data=text_classification"]
    if (group, option) in (("model", "timm"), ("data", "images")):
        return ["model=timm", "data=images"]
    if (group, option) == ("data", "tokenized_text"):
        return ["model=hf_causal_lm", f"model.path={saved_llama()}"]
    if (group, option) == ("data", "instruct"):  # a table of examples is required: the shipped one
        return [f"data.path={CONF_DIR.parent / 'examples' / 'data' / 'instruct.jsonl'}"]
    if (group, option) == ("data", "preference") or (group == "objective" and option != "sft"):
        # A preference objective and preference pairs go together: the shipped pairs.
        pairs = [f"data.path={CONF_DIR.parent / 'examples' / 'data' / 'preference.jsonl'}", "data=preference"]
        return [*pairs, "objective=dpo"] if group == "data" else pairs
    return []



def test_every_group_has_an_option() -> None:
    for g in GROUPS:
        assert _options(g), f"conf/{g}/ has no option"


@pytest.mark.parametrize(("group", "option"), _pairs())
def test_group_option_composes_and_validates(group: str, option: str, tmp_path: Path) -> None:
    composed = compose([f"{group}={option}", *_extra_for(group, option)], run_dir=str(tmp_path))
    if (group, option) == ("trainer", "gpu") and not torch.cuda.is_available():
        # Composes everywhere; a machine without CUDA refuses it up front, naming the fix.
        with pytest.raises(ConfigError, match="no CUDA device.*trainer=cpu"):
            load(composed)
        return
    if refused_without_vision(composed):
        return
    assert isinstance(load(composed), RunConfig)


@pytest.mark.parametrize("recipe", sorted(recipes()))
def test_recipe_composes_and_validates(recipe: str, tmp_path: Path) -> None:
    composed = compose([f"+recipe={recipe}"], run_dir=str(tmp_path))
    if refused_without_vision(composed):
        return
    cfg = load(composed)
    assert cfg.recipe == recipe
    assert recipes()[recipe], f"recipes/{recipe}.yaml has no description comment"


def test_recipe_overrides_groups(tmp_path: Path) -> None:
    cfg = load(compose(["+recipe=smoke", "compile=blocks"], run_dir=str(tmp_path)))
    assert cfg.compile.scope is Scope.blocks
    assert cfg.model.n_layer == 2  # from the recipe


def test_interpolations_resolve(tmp_path: Path) -> None:
    cfg = load(compose(["data.seq_len=64"], run_dir=str(tmp_path)))
    assert cfg.model.block_size == 64
    assert cfg.scheduler.total_steps == cfg.trainer.max_steps
    assert cfg.logger["csv"].save_dir == str(tmp_path)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("compile.scop=step", "scop"),
        ("compile.scope=bogus", "bogus"),
        ("trainer.max_steps=abc", "max_steps"),
        ("model.n_layr=3", "n_layr"),
        ("+model.n_layr=3", "n_layr"),  # + adds a key under any node; load refuses it under a typed one
        ("+trainer.fsdp.consolidat=false", "consolidat"),
    ],
)
def test_bad_key_or_value_is_named(override: str, expected: str, tmp_path: Path) -> None:
    # Hydra refuses it at composition (an unknown key, a value of the wrong type or enum), naming it,
    # or load does (a key added with + under a typed node).
    with pytest.raises((HydraException, OmegaConfBaseException, ConfigError)) as info:
        load(compose(["+recipe=smoke", override], run_dir=str(tmp_path)))
    assert expected in str(info.value)


def test_impossible_combination_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="step_backward"):
        load(compose(["compile=step_backward", "trainer.devices=2"], run_dir=str(tmp_path)))


def test_composed_config_is_plain_yaml(tmp_path: Path) -> None:
    cfg = compose(["+recipe=quickstart"], run_dir=str(tmp_path))
    text = OmegaConf.to_yaml(cfg, resolve=True)
    assert "scope: step" in text


def test_help_lists_the_options_a_user_picks_not_the_schemas() -> None:
    from hydra import initialize_config_dir

    from runner.config.composing.help_text import groups_help, recipes_help, rendering_help
    from runner.config.composing.store import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        groups = groups_help().splitlines()
        # Listed only while the help renders: every other composed config resolves the template to nothing.
        assert OmegaConf.create({"g": "${runner.groups:}"}).g == ""
        with rendering_help():
            assert OmegaConf.create({"g": "${runner.groups:}"}).g.splitlines() == groups
    assert "model: " + ", ".join(o for o in _options("model")) in groups
    assert "logger: all, csv, tensorboard, wandb" in groups
    assert any(line.startswith("sweep (+sweep=NAME): ") for line in groups)
    assert not any("_schema" in line or line.startswith(("hydra", "recipe")) for line in groups), groups
    assert {line.split(":")[0] for line in groups} >= set(GROUPS)
    assert all(f"  {name} " in recipes_help() for name in recipes())


def test_validation_reports_what_the_targets_mean(tmp_path: Path) -> None:
    """Bits per byte on byte-level text, accuracy on classes, neither on a tokenizer's tokens: a classifier's
    summary never shows a bits-per-byte figure."""
    from runner.build import val_metric
    from runner.training.module import ValMetric

    def metric(*overrides: str) -> ValMetric:
        return val_metric(load(compose(list(overrides), run_dir=str(tmp_path))))

    assert metric("+recipe=smoke") is ValMetric.bits_per_byte
    assert metric("+recipe=smoke_mlp") is ValMetric.accuracy
    assert metric("+recipe=bert_classify") is ValMetric.accuracy
    saved = saved_llama()
    assert metric("model=hf_causal_lm", f"model.path={saved}", "data=tokenized_text") is ValMetric.none
