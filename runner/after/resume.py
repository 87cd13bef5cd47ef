"""``runner resume RUN_DIR [overrides]`` (or ``hydra.run.dir=RUN_DIR ckpt_path=last``): the run's saved command line
plus the new overrides, in place, from its last checkpoint; an override that changes what the checkpoint's state fits,
a recipe edited since, or data changed since (unless ``--allow-changed-data``) is refused in one paragraph."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner import hub
from runner.after.source import (
    ALLOW_CHANGED_DATA,
    CONFIG,
    RUN_KEYS,
    compose_run,
    merge_overrides,
    override_key,
    run_dir_error,
    saved_overrides,
)
from runner.config import ConfigError
from runner.config.composing.hub_names import remember_revisions
from runner.config.composing.loading import localized
from runner.config.composing.precheck import command_line

GROUPS = ("model", "data", "optimizer", "scheduler")
# Keys a resume may change: the loader's workers; the schedule's length (trainer.max_steps) and scheduler.on_resume.
FREE = {"data.num_workers", "scheduler.total_steps", "scheduler.on_resume"}
_WHY = {
    "model": "changes the model's shape, and the checkpoint's weights do not fit it",
    "data": "changes the data, and the checkpoint's place in it (its next batch) would point elsewhere",
    "optimizer": "changes the optimizer, whose state (its learning rate too) comes back from the checkpoint: "
                 "the setting would be ignored or the state would not fit",
    "scheduler": "changes the schedule, whose plan comes back from the checkpoint and would ignore it "
                 "(scheduler.on_resume says what a new trainer.max_steps does)",
}
_PLAIN = re.compile(r"^[A-Za-z0-9_./-]+$")
ALLOW_FLAG = "--allow-changed-data"  # after.allow_changed_data=true for this resume
_USAGE = "python -m runner resume RUN_DIR [--allow-changed-data] [overrides] (e.g. trainer.max_steps=600)"


def _value(path: Path) -> str:
    """A path as an override's value: quoted when Hydra's grammar would read a character of it."""
    text = str(path)
    return text if _PLAIN.match(text) else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def resume_command(argv: Sequence[str]) -> list[str] | None:
    """The command line a resume runs (the run's saved one with the overrides in place), or None for no resume."""
    if argv[:1] == ["resume"]:
        if len(argv) < 2 or "=" in argv[1]:
            raise ConfigError(f"runner resume needs the run directory first: {_USAGE}.")
        from runner import hydra_internals
        from runner.after.cli import arguments_error, parser_flags, refuse

        hydra = parser_flags(hydra_internals.args_parser())  # a flag neither ALLOW_FLAG nor Hydra's is refused
        unknown = [a for a in argv[2:] if a.startswith("-") and a != ALLOW_FLAG and a.split("=", 1)[0] not in hydra]
        refuse(arguments_error("resume", unknown, [ALLOW_FLAG], _USAGE))
        return _resumed(Path(argv[1]), [f"{ALLOW_CHANGED_DATA}=true" if a == ALLOW_FLAG else a for a in argv[2:]])
    args = command_line(argv)
    if args is None or args.multirun:
        return None
    given = {override_key(o): o.split("=", 1)[-1] for o in args.overrides}
    if "hydra.run.dir" not in given or not given.get("ckpt_path"):
        return None
    run_dir = Path(given["hydra.run.dir"].strip("'\""))
    if not (run_dir / CONFIG).is_file():
        return None  # not a run of runner's: Lightning's own resume, as before
    others = [o for o in args.overrides if override_key(o) not in RUN_KEYS]
    if not others:
        allow = [o for o in args.overrides if override_key(o) == ALLOW_CHANGED_DATA]
        return _resumed(run_dir, [f"ckpt_path={given['ckpt_path']}", *allow])
    check_resume(run_dir, args.overrides)
    return None


def _resumed(run_dir: Path, given: list[str]) -> list[str]:
    if (problem := run_dir_error(run_dir)) is not None:
        raise ConfigError(f"runner resume: {problem}")
    if any(override_key(o) == "hydra.run.dir" for o in given):
        raise ConfigError(f"runner resume {run_dir} resumes the run in its own directory: drop hydra.run.dir "
                          "(to train the trained model elsewhere, start a new run).")
    if not any(override_key(o) == "ckpt_path" for o in given):
        given.append("ckpt_path=last")
    remember_revisions(run_dir)  # its Hub names: the commits its command line pins, and the revisions asked
    argv = [*merge_overrides(saved_overrides(run_dir), given), f"hydra.run.dir={_value(run_dir)}"]
    check_resume(run_dir, argv, typed=given)
    return argv


def _flat(node: Any, prefix: str) -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}.{k}"))
        return out
    return {prefix: node}


def _resolved(cfg: Any, group: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, group)
    plain = OmegaConf.to_container(node, resolve=True, enum_to_str=True) if node is not None else None
    return _flat(plain, group) if isinstance(plain, dict) else {group: plain}


def changed_keys(run_dir: Path, overrides: Sequence[str], new: Any = None) -> list[tuple[str, Any, Any]]:
    """``(key, run's value, resume's value)`` of each setting of ``GROUPS`` that ``overrides`` change, except ``FREE``
    keys and model settings that keep every weight's shape."""
    from omegaconf import OmegaConf

    new = compose_run(run_dir, overrides) if new is None else new
    old = OmegaConf.load(run_dir / CONFIG)
    out = []
    for group in GROUPS:
        before, after = _resolved(old, group), _resolved(new, group)
        diffs = [(k, before.get(k), after.get(k)) for k in sorted({*before, *after})
                 if k not in FREE and before.get(k) != after.get(k)]
        if group == "model" and diffs and _same_shapes(old.model, new.model):
            diffs = []
        out += diffs
    return out


def _same_shapes(old: Any, new: Any) -> bool:
    """Whether both model nodes build (on the meta device) the same class with every weight of the same shape."""
    from runner.config.target_objects import meta_model

    built = [meta_model(node) for node in (old, new)]
    if any(m is None for m in built) or type(built[0]) is not type(built[1]):
        return False
    shapes = [{k: tuple(v.shape) for k, v in m.state_dict().items()} for m in built if m is not None]
    return shapes[0] == shapes[1]


def check_resume(run_dir: Path, overrides: Sequence[str], typed: Sequence[str] | None = None) -> None:
    """Refuse a resume whose config changes what its checkpoint fits, or whose data changed (``typed``: the user's)."""
    try:
        new = compose_run(run_dir, overrides)
        changes = changed_keys(run_dir, overrides, new)
    except ConfigError:
        raise
    except Exception:
        return None  # a command line that does not compose: precheck names the problem next, in its words
    if changes:
        raise ConfigError(_settings_refusal(run_dir, overrides, typed, changes))
    if (problem := _data_refusal(run_dir, new)) is not None:
        raise ConfigError(problem)


def _settings_refusal(run_dir: Path, overrides: Sequence[str], typed: Sequence[str] | None,
                      changes: list[tuple[str, Any, Any]]) -> str:
    typed_keys = {override_key(o) for o in (overrides if typed is None else typed)}
    try:  # the keys the run's own command line composes to differently from its saved config: the files changed
        files = {k for k, _, _ in changed_keys(run_dir, saved_overrides(run_dir))}
    except Exception:  # a saved command line that no longer composes: no key can be put down to the files
        files = set()
    shown = [f"{key}={_text(now)} (the run trained with {_text(was)})" for key, was, now in changes[:4]]
    more = f" and {len(changes) - 4} more" if len(changes) > 4 else ""
    why = "; ".join(dict.fromkeys(_WHY[key.split(".")[0]] for key, _, _ in changes))
    from_files = [key for key, _, _ in changes if key in files]
    origin = (f"{', '.join(from_files[:4])} changed because the config files (a recipe or a conf/ option) changed "
              "since the run. " if from_files else "")

    def given(key: str) -> bool:
        return any(key == k or key.startswith(f"{k}.") or k.startswith(f"{key}.") for k in typed_keys) or \
            key.split(".")[0] in typed_keys

    if typed is None and any(key not in files and not given(key) for key, _, _ in changes):
        origin += "The overrides differ from its saved command line (.hydra/overrides.yaml). "
    return (f"cannot resume {run_dir} with {', '.join(shown)}{more}: that {why}. {origin}A resume takes the run's "
            f"own config: `python -m runner resume {run_dir}` with no such override (trainer.max_steps and other "
            "trainer, compile and logging settings may change). To train with the new setting, start a new run.")


HUB_DATA_KEYS = ("data.path", "data.val_path", "data.tokenizer")


def _data_refusal(run_dir: Path, new: Any) -> str | None:
    """Why the data the resume would read is not the data the run recorded (its files, the tokenizer), or None."""
    from omegaconf import OmegaConf

    from runner.data.fingerprint import changes, data_fingerprint, read_fingerprint

    before = read_fingerprint(run_dir)
    if before is None or OmegaConf.select(new, ALLOW_CHANGED_DATA):
        return None
    data = _resolved(new, "data")
    if any(hub.wanted(k, data.get(k), "data" if "path" in k else "tokenizer") for k in HUB_DATA_KEYS):
        node = localized(new).data  # the files the Hub names resolve to, as the run read them
        data.update({k: getattr(node, k.split(".")[1], None) for k in HUB_DATA_KEYS if k in data})
    now = data_fingerprint(data.get("data.path"), data.get("data.val_path"), data.get("data.tokenizer"),
                           text="data.tokenizer" in data)
    found = changes(before, now)
    if not found:
        return None
    return (f"cannot resume {run_dir}: its data changed since the run read it ({'; '.join(found)}). The checkpoint's "
            "place in the data (its next batch) and the validation split would no longer mean what they did. Resume "
            "on the data the run trained on, or train on the changed data with `python -m runner resume "
            f"{run_dir} {ALLOW_FLAG}` ({ALLOW_CHANGED_DATA}=true; the summary then says what changed), or start a "
            "new run.")


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
