"""The one paragraph a bad config becomes: Hydra's and OmegaConf's errors in runner's words, each with
the fix, and "did you mean" from the schema's own field names and the group's option files."""

from __future__ import annotations

import dataclasses
import re

from hydra.errors import MissingConfigException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from runner import hydra_internals
from runner.config.composing.layers import RECIPE_GROUP, default_groups
from runner.config.errors import close_matches
from runner.config.schema.targets import is_schema_name, target_schemas

# Detail lines Hydra and OmegaConf append that say nothing to a user.
_NOISE = ("full_key:", "reference_type=", "object_type=", "Config search path", "provider=")
_CFG_JOB = "`runner --cfg job` prints every key with its value."


def _keys(schema: type) -> list[str]:
    return [f.name for f in dataclasses.fields(schema)]  # type: ignore[arg-type]


def unknown_key(full_key: str, schema: type, value: str | None, source: str | None = None) -> str:
    """A key the typed node ``schema`` has no field for (written by ``source``, a recipe or an option
    file, when not the command line): the close field names as overrides, or else every field it has."""
    parent, _, key = full_key.rpartition(".")
    node = f"{parent} ({schema.__name__})" if parent else f"the root config ({schema.__name__})"
    written = full_key if value is None else f"{full_key}={value}"
    head = f"{source} sets {written}, but" if source else f"{written}:"
    prefix, suffix = (f"{parent}." if parent else ""), ("" if value is None else f"={value}")
    if matches := close_matches(key, _keys(schema)):
        fix = "did you mean " + " or ".join(f"`{prefix}{m}{suffix}`" for m in matches) + "?"
    else:
        fix = f"its keys are {', '.join(k for k in _keys(schema) if not k.startswith('_'))}."
    return f"invalid configuration: {head} {node} has no key {key}; {fix} {_CFG_JOB}"


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cause: BaseException | None = e
    while cause is not None and cause not in out:
        out.append(cause)
        cause = cause.__cause__ or cause.__context__
    return out


def _lines(e: BaseException) -> list[str]:
    parts: list[str] = []
    for cause in _chain(e):
        for line in str(cause).splitlines():
            line = " ".join(line.split())
            if line and line not in parts:
                parts.append(line)
    return parts


def _typed_unknown(e: BaseException) -> tuple[str, type] | None:
    """(full key, schema) when OmegaConf refused a key a typed node has no field for."""
    for cause in _chain(e):
        schema = getattr(cause, "object_type", None)
        key, full_key = getattr(cause, "key", None), getattr(cause, "full_key", None)
        if (isinstance(cause, OmegaConfBaseException) and isinstance(schema, type) and dataclasses.is_dataclass(schema)
                and isinstance(key, str) and isinstance(full_key, str) and key not in _keys(schema)):
            return full_key, schema
    return None


def _recipe_field(recipe: str, full_key: str, schema: type) -> str:
    """A recipe that sets a field the selected group option (an open ``_target_`` group) has no field for."""
    group, field = full_key.split(".")[0], full_key.rpartition(".")[2]
    option, target = next(((o, getattr(s, "_target_", "?")) for o, s in target_schemas().get(group, {}).items()
                           if s is schema), (schema.__name__, "?"))
    return (f"invalid configuration: recipe {recipe} sets {full_key}, but the selected {group} "
            f"({group}={option}: {target}) has no field {field}. A recipe that sets {group} fields must "
            f"select the {group} option they belong to (`override /{group}: NAME` in its defaults; put "
            f"sizes in a conf/{group}/NAME.yaml option), or drop {full_key} from the recipe; or choose a "
            f"{group} that has {field}.")


def _missing_option(e: MissingConfigException, text: str) -> str | None:
    """A group option that no config file provides: the close option names, and every option."""
    group, _, name = (e.missing_cfg_file or "").rpartition("/")
    if not group or e.options is None:
        return None
    options = sorted(o for o in e.options if not is_schema_name(group, o))
    plus = "" if group.split("/")[0] in default_groups() else "+"
    parent = re.search(r"In '([^']+)': Could not find", text)
    where = f"{parent.group(1)} selects " if parent and parent.group(1) != "config" else ""
    what = f"no recipe {name}" if group == RECIPE_GROUP else f"{group} has no option {name}"
    matches = close_matches(name, options)
    fix = ("did you mean " + " or ".join(f"`{plus}{group}={m}`" for m in matches) + "? ") if matches else ""
    return (f"invalid configuration: {where}{plus}{group}={name}: {what}; {fix}Options in {group}: "
            f"{' '.join(options)}. `runner --help` lists every group's options, `runner --list-recipes` every recipe.")


def _source(text: str) -> str | None:
    """The config file whose merge failed (``In 'recipe/smoke': ...``), as ``recipe NAME (recipes/NAME.yaml)``
    or ``option GROUP=NAME (conf/GROUP/NAME.yaml)``; None for the command line."""
    m = re.search(r"In '\+?([^']+)': ", text)
    if m is None or m.group(1) == "config":
        return None
    group, _, name = m.group(1).rpartition("/")
    if group == RECIPE_GROUP:
        return f"recipe {name} (recipes/{name}.yaml)"
    return f"option {group}={name} (conf/{group}/{name}.yaml)"


def _open_node_key(e: BaseException, refused: str | None) -> str | None:
    """A misspelt key under a node open by design (``logger``, ``model=custom``, ``compile.options``):
    the close keys it already has, as the override with the key corrected; else how ``+`` adds it."""
    for cause in _chain(e):
        key, full_key = getattr(cause, "key", None), getattr(cause, "full_key", None)
        parent = getattr(cause, "parent_node", None)
        if not (isinstance(cause, OmegaConfBaseException) and isinstance(key, str) and isinstance(full_key, str)):
            continue
        written = refused or full_key
        present = [str(k) for k in parent] if isinstance(parent, DictConfig) else []
        if matches := close_matches(key, present):
            node = full_key.rpartition(".")[0]
            fixed = [f"`{node + '.' if node else ''}{m}{written[len(full_key):]}`" for m in matches]
            return (f"invalid configuration: {written}: {node or 'the root config'} has no key {key}; "
                    f"did you mean {' or '.join(fixed)}? {_CFG_JOB}")
        return (f"invalid configuration: {written}: {full_key} is not set. Check the key's spelling; this node "
                f"takes any key, and `+{written}` adds it as a new one. {_CFG_JOB}")
    return None


def explain(e: Exception) -> str:
    """Hydra's and OmegaConf's message in one paragraph, with the fix appended."""
    lines = _lines(e)
    text = "\n".join(lines)
    source = _source(text)
    refused = hydra_internals.refused_override("\n".join(str(c) for c in _chain(e)))
    if (typed := _typed_unknown(e)) is not None:
        full_key, schema = typed
        group, key = full_key.split(".")[0], full_key.rpartition(".")[2]
        if source and source.startswith("recipe ") and group in target_schemas() and not close_matches(
                key, _keys(schema)):
            return _recipe_field(source.split()[1], full_key, schema)
        value = refused.partition("=")[2] if refused and refused.startswith(f"{full_key}=") else None
        return unknown_key(full_key, schema, value, source)
    missing = next((c for c in _chain(e) if isinstance(c, MissingConfigException)), None)
    if missing is not None and (special := _missing_option(missing, text)) is not None:
        return special
    if refused is not None and (special := _open_node_key(e, refused)) is not None:
        return special
    msg = " ".join(ln for ln in lines if not ln.startswith(_NOISE))
    if "Missing mandatory value" in msg:
        key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key:")), "the key")
        fix = f"Give {key} a value on the command line ({key}=...) or in a recipe."
    elif (m := re.search(r"Interpolation key '([^']+)' not found", msg)) is not None:
        fix = (f"An option refers to {m.group(1)}, which the other selected options do not have: pick options "
               "that fit together (model=mlp goes with data=synthetic), or set the key.")
    elif "not in" in msg or "Key '" in msg:
        fix = f"Check the key's spelling. {_CFG_JOB}"
    elif "Could not find" in msg or "Could not load" in msg:
        fix = ("Pick one of the available options listed above; `runner --list-recipes` lists recipes, "
               "`runner --help` every group's options.")
    elif "Value '" in msg or "Invalid value" in msg:
        fix = "Give a value of the type (or one of the choices) the schema declares; see runner/config/schema/."
    else:
        fix = "Fix the override; `runner --cfg job` prints the composed config."
    return f"invalid configuration: {msg} {fix}"
