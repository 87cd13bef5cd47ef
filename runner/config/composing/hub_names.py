"""The Hub names of a run's settings, resolved once where the config is loaded: each pinned to its commit, fetched whole
into the Hugging Face cache and replaced by the local folder. What each resolved to is kept for the report
(:func:`pins_of`) and as overrides (:func:`pinned_overrides`), so that ``resume``, ``eval``, ``export`` and ``generate``
read the same commits."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from runner import hub
from runner.config.errors import ConfigError
from runner.config.schema import RunConfig

log = logging.getLogger(__name__)

# Every setting that may name the Hub: (node, field, what it holds). The model comes first: a tokenizer that names the
# model's repo (data.tokenizer's default, ${model.path}) reads the model's snapshot.
SETTINGS = (("model", "path", "model"), ("peft", "path", "adapter"), ("data", "tokenizer", "tokenizer"),
            ("data", "path", "data"), ("data", "val_path", "data"))
# data's settings that choose within a Hub data set; no data module takes them.
DATA_FIELDS = ("config", "split", "val_split")
# The revisions the command line asked for, by pinned value (JSON), handed from the launch to the run's job and its
# ranks, whose command line names the commits.
ASKED_ENV = "RUNNER_HUB_ASKED"
_PINS: dict[int, list[hub.Pin]] = {}


def pins_of(run_cfg: RunConfig) -> list[hub.Pin]:
    """What :func:`localize` resolved for ``run_cfg`` (empty for a run on local paths alone)."""
    return list(_PINS.get(id(run_cfg), []))


def localize(run_cfg: RunConfig) -> list[hub.Pin]:
    """Replace each Hub name in ``run_cfg`` by the folder it resolved to, fetched; ``ConfigError`` for one
    unreadable."""
    data = run_cfg.data
    config, split, val_split = (getattr(data, f, None) for f in DATA_FIELDS)
    pins: list[hub.Pin] = []
    by_value: dict[str, hub.Pin] = {}
    asked = json.loads(os.environ.get(ASKED_ENV) or "{}")
    try:
        for group, attr, kind in SETTINGS:
            node = getattr(run_cfg, group, None)
            value = getattr(node, attr, None)
            if not isinstance(value, str) or (kind == "tokenizer" and value == "bytes"):
                continue
            key = f"{group}.{attr}"
            if kind == "data":
                wanted = hub.wanted(key, value, kind, config, val_split if attr == "val_path" else split)
            else:
                wanted = hub.wanted(key, value, kind)
            if wanted is None:
                continue
            if asked.get(value):  # pinned by the launch: the report says what was asked
                wanted = dataclasses.replace(wanted, asked_as=asked[value])
            _moved(wanted)
            same = by_value.get(value)
            pin = hub.relocated(same, key) if same and kind == "tokenizer" else hub.fetch(wanted)
            by_value[value] = pin
            local, pin = _local(pin, attr)
            setattr(node, attr, local)
            pins.append(pin)
            _say(pin)
        _own_validation(data, pins)
    except hub.HubError as e:
        raise ConfigError(str(e)) from e
    if not any(p.wanted.kind == "data" for p in pins):
        for f in DATA_FIELDS:
            if getattr(data, f, None) is not None:
                raise ConfigError(f"data.{f}={getattr(data, f)} chooses within a Hugging Face Hub data set, and "
                                  f"data.path={getattr(data, 'path', None)} is none. Give data.path=hf://datasets/"
                                  f"ORG/NAME, or drop data.{f} (~data.{f}).")
    _PINS[id(run_cfg)] = pins
    weakref.finalize(run_cfg, _PINS.pop, id(run_cfg), None)
    return pins


def _local(pin: hub.Pin, attr: str) -> tuple[str, hub.Pin]:
    """The path the setting reads now, and the pin with the split it chose."""
    if pin.wanted.kind != "data":
        return pin.local, pin
    split = pin.wanted.split or "train"
    if attr == "val_path" and pin.wanted.split is None:
        found = pin.validation_split
        if found is None:
            raise hub.HubError(f"data.val_path={pin.wanted.given}: {pin.wanted.name} has no validation split "
                               f"({', '.join(pin.splits)}): name the one that validates with data.val_split=NAME.")
        split = found
    return hub.split_path(pin, split), dataclasses.replace(pin, wanted=dataclasses.replace(pin.wanted, split=split))


def _own_validation(data: Any, pins: list[hub.Pin]) -> None:
    """A Hub data set's own validation split validates when data.val_path is unset: never the training split."""
    train = next((p for p in pins if p.wanted.key == "data.path"), None)
    if train is None or getattr(data, "val_path", None) is not None:
        return
    split = data.val_split or train.validation_split
    if split is None:
        return
    if split == (train.wanted.split or "train"):
        raise hub.HubError(f"data.val_split={split} is the split that trains (data.split): validation never overlaps "
                           f"training. Name another split of {train.wanted.name} ({', '.join(train.splits)}), or "
                           "drop data.val_split (~data.val_split) to validate on a seeded share of the training rows.")
    data.val_path = hub.split_path(train, split)
    pins.append(hub.relocated(train, "data.val_path", split=split))
    log.info("data: data.path=%s validates on its own %s split (data.val_path unset)", train.wanted.given, split)


def _moved(wanted: hub.Wanted) -> None:
    """A pinned name whose branch the cache now has at another commit: said, and the pinned commit read all the same."""
    if not (wanted.asked_as and wanted.revision and wanted.asked_as != wanted.revision):
        return
    now = hub.cached_commit(dataclasses.replace(wanted, revision=wanted.asked_as, asked_as=None))
    if now and now != wanted.revision:
        log.warning("hub: %s: %s's %s is now at %s in this machine's cache; this run reads %s, the commit it was "
                    "pinned to", wanted.key, wanted.name, wanted.asked_as, now[:12], wanted.revision[:12])


def remember_revisions(run_dir: Path) -> None:
    """What a run's Hub names asked for (its report.json), for the process that resumes it."""
    try:
        records = json.loads((run_dir / "report.json").read_text()).get("run/hub") or []
    except (OSError, ValueError):
        return
    asked = json.loads(os.environ.get(ASKED_ENV) or "{}")
    for r in records:
        asked.setdefault(r["pinned"], r["revision"])
    os.environ[ASKED_ENV] = json.dumps(asked)


def _say(pin: hub.Pin) -> None:
    w = pin.wanted
    what = f" (config {w.config or 'default'}, split {w.split or 'train'})" if w.kind == "data" and \
        w.key == "data.path" else ""
    log.info("hub: %s=%s%s: commit %s of %s, %d files, %.1f MB in %s", w.key, w.given, what, pin.commit[:12],
             w.asked, pin.files, pin.bytes / 1e6, hub.cache_dir())


def pinned_overrides(overrides: Sequence[str], pins: Iterable[hub.Pin]) -> tuple[list[str], dict[str, str]]:
    """``overrides`` with each Hub name replaced by its pinned value (appended where a recipe gave it), and what each
    pinned value asked for."""
    out = list(overrides)
    asked: dict[str, str] = {}
    for pin in pins:
        w = pin.wanted
        asked[pin.value] = w.asked
        if w.revision == pin.commit:
            continue
        for i, o in enumerate(out):
            k, sep, v = o.partition("=")
            if sep and k.lstrip("+~") == w.key:
                values = v.split(",")
                out[i] = f"{k}={','.join(pin.value if x == w.given else x for x in values)}"
                break
        else:
            if not w.implied:  # an implied one is pinned through the setting it reads
                out.append(f"{w.key}={pin.value}")
    return out, asked
