"""Every ``group=option`` and ``key=value`` override that README.md, docs/ or any message of runner's
suggests composes, and every value of every closed config enum has its option file.

The suggestions are found by reading README.md, docs/*.md, the YAML comments and every string literal
in runner/ (error messages, warnings, docstrings): a fix a message names that Hydra then refuses is a
bug (``+cudagraphs.mode=reduce_overhead`` was one). The "did you mean" suggestions a misspelt key or
option gets are built from the schema's fields and the group's files at run time; tests/test_bad_input.py
runs each one it makes.
"""

from __future__ import annotations

import ast
import re
from enum import Enum
from pathlib import Path

import pytest

from runner.config import compose, schema

ROOT = Path(__file__).resolve().parents[1]
_GROUPS = {"compile", "dynamic", "offload", "cudagraphs", "trainer", "data", "model", "optimizer", "scheduler",
           "telemetry", "reliability", "after", "logger", "seed", "ckpt_path", "recipe", "sweep", "tune", "peft"}
_TOKEN = re.compile(r"(?<![\w.+~/$-])(\+{0,2}[a-z_]+(?:\.[a-z_]+)*=(?:\[[^\]\s]*\]|[^\s`'\",;)|]+))")
# Placeholders, and Python constructor calls in code examples (``compile=CompileConfig(...)`` is a keyword
# argument, not an override; Hydra's own override functions, ``choice(...)``, are lowercase and still scanned).
_PLACEHOLDER = re.compile(r"[<>{}%]|^[A-Z_]+$|ClassName|pkg\.|^N$|^(True|False|None)$|^(name|value|option)$"
                          r"|\b[A-Z]\w*\(")


def _texts() -> list[tuple[str, str]]:
    """(where, text) of README.md, docs/, the YAML files and every string literal in runner/."""
    out = [("README.md", (ROOT / "README.md").read_text())]
    for path in sorted((ROOT / "docs").rglob("*.md")):  # the topics README points to
        out.append((str(path.relative_to(ROOT)), path.read_text()))
    for path in sorted([*(ROOT / "conf").rglob("*.yaml"), *(ROOT / "recipes").rglob("*.yaml")]):
        out.append((str(path.relative_to(ROOT)), path.read_text()))
    for path in sorted((ROOT / "runner").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.value))
    return out


def suggested_overrides() -> dict[str, str]:
    """Override -> where it is suggested."""
    found: dict[str, str] = {}
    for where, text in _texts():
        for match in _TOKEN.finditer(text):
            token = match.group(1).rstrip(".:")
            if token.endswith("]") and "[" not in token:  # "[+recipe=NAME]" in a usage line
                token = token[:-1]
            key, _, value = token.lstrip("+").partition("=")
            if key.split(".")[0] not in _GROUPS or not value or _PLACEHOLDER.search(value):
                continue
            found.setdefault(token, where)
    return found


SUGGESTED = suggested_overrides()


def test_the_scan_finds_the_suggestions_users_read() -> None:
    for known in ("cudagraphs=reduce_overhead", "cudagraphs=auto", "compile.optimizer=graphed",
                  "compile.on_error=eager", "offload=bf16", "dynamic=unbacked",
                  "trainer=cpu", "compile.fullgraph=false", "telemetry.trace=true", "tune.steps=12",
                  "trainer=fsdp", "compile=blocks", "trainer.precision=bf16-mixed"):
        assert known in SUGGESTED
    assert len(SUGGESTED) >= 60


EXAMPLE = ROOT / "examples" / "my_project"


def _contexts(override: str) -> list[list[str]]:
    """The override on its own, then after each option of its group: a key that only some options have
    (``model.config`` of ``model=hf_causal_lm``, ``data.image_size`` of ``data=images``) composes with one."""
    key = override.lstrip("+").partition("=")[0]
    group = key.split(".")[0]
    options = sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml")) if "." in key else []
    return [[override], *([f"{group}={option}", override] for option in options)]


@pytest.mark.parametrize("override", sorted(SUGGESTED), ids=str)
def test_suggested_override_composes(override: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Composes in this repository, or (the README's "your own project" section) from the example
    project's directory, whose conf/ and recipes/ runner reads before its own; on its own or with the
    option of its group that has the key."""
    if override.startswith("tune."):  # runner tune's own keys: its schema, not Hydra's composition
        from runner.config.tune import load_tune, split_overrides

        load_tune(split_overrides([override])[1])
        return
    errors = []
    for cwd in (ROOT, EXAMPLE):
        monkeypatch.chdir(cwd)
        for overrides in _contexts(override):
            try:
                compose(overrides, run_dir=str(tmp_path))
                return
            except Exception as e:  # noqa: BLE001 - any failure to compose is the bug this test is for
                if len(overrides) == 1:
                    errors.append(f"from {cwd.name}: {e}")
    pytest.fail(f"{override} (suggested in {SUGGESTED[override]}) does not compose: {' | '.join(errors)}")


def _closed_groups() -> dict[str, type[Enum]]:
    """Config groups whose option is one enum field: group -> enum."""
    return {"compile": schema.Scope, "dynamic": schema.ShapePolicy, "offload": schema.OffloadStrategy,
            "cudagraphs": schema.CudaGraphMode}


@pytest.mark.parametrize("group", sorted(_closed_groups()))
def test_every_enum_value_of_a_closed_group_has_its_option_file(group: str, tmp_path: Path) -> None:
    """``group=<value>`` selects an option file for every value of the group's enum (``compile=eager``
    is scope ``none``: YAML reads ``none``/``off`` specially, so that one option is named for what it does)."""
    enum = _closed_groups()[group]
    field = {"compile": "scope", "dynamic": "policy", "offload": "strategy", "cudagraphs": "mode"}[group]
    options = {p.stem for p in (ROOT / "conf" / group).glob("*.yaml")}
    selected = {getattr(compose([f"{group}={o}"], run_dir=str(tmp_path))[group], field) for o in options}
    for member in enum:
        assert member in selected, f"no conf/{group}/*.yaml selects {group}.{field}={member.value}"
