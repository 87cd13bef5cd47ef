"""Advice that fits (issue 75): a recipe on the data runner ships runs from any directory (an installed runner ships
``examples/data`` as ``runner/_data``: ``tests/test_install.py`` runs one from a fresh environment), and a
``data.path`` that does not exist is refused with what that data option takes, not with another one's fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.config import ConfigError, compose, load
from runner.config.composing.precheck import precheck
from runner.config.paths import SHIPPED_DATA, shipped


@pytest.mark.parametrize("recipe", ["instruct_tiny", "instruct_lora", "instruct_llama3"])
def test_a_recipe_on_shipped_data_runs_from_another_directory(recipe: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert not (tmp_path / "examples").exists()
    precheck([f"+recipe={recipe}", "compile.backend=eager"])  # every check, the data's own included
    cfg = load(compose([f"+recipe={recipe}"], run_dir=str(tmp_path / "run")))
    assert cfg.data.path == str(SHIPPED_DATA / "instruct.jsonl") and os.path.isfile(cfg.data.path)  # type: ignore[union-attr]


def test_only_runners_own_example_paths_are_found_where_runner_is(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert shipped("examples/data/instruct_chat.jsonl") == str(SHIPPED_DATA / "instruct_chat.jsonl")
    assert shipped("examples/data/nothere.jsonl") == "examples/data/nothere.jsonl"  # refused below, as given
    assert shipped("instruct.jsonl") == "instruct.jsonl"  # not runner's: the user's file, missing
    (tmp_path / "examples" / "data").mkdir(parents=True)
    (tmp_path / "examples" / "data" / "instruct.jsonl").write_text('{"prompt": "q", "response": "a"}\n')
    assert shipped("examples/data/instruct.jsonl") == "examples/data/instruct.jsonl"  # the directory's own first


@pytest.mark.parametrize(("overrides", "says", "never"), [
    (["data=instruct"], ["a table of examples", "prompt/response columns", "examples/data/instruct.jsonl"],
     "stdlib"),
    (["data=text"], ["a directory or file of text", "data.path=null", "stdlib source"], "table of examples"),
    (["data=text_classification"], ["labelled rows", "labelled by their package"], "table of examples"),
])
def test_a_missing_data_path_gets_the_fix_of_its_data_kind(overrides: list[str], says: list[str], never: str,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        precheck([*overrides, "data.path=missing.jsonl"])
    message = str(info.value)
    assert message.startswith(f"data.path=missing.jsonl does not exist (a relative path is read from {tmp_path})")
    assert all(s in message for s in says) and never not in message, message


def test_a_missing_image_folder_gets_the_fix_of_images() -> None:
    """data=images wants a timm model (not importable beside this torch): the check itself, on the typed config."""
    from runner.config.checks.run import check_data_path
    from runner.config.schema import RunConfig
    from runner.config.schema.data import ImageDataSchema

    cfg = RunConfig()
    cfg.data = ImageDataSchema(path="/nonexistent/images")
    message = check_data_path(cfg) or ""
    assert "ROOT/CLASS/IMAGE" in message and "synthetic images" in message and "stdlib" not in message
