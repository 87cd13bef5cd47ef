"""Every run its own directory: runs started in the same second never share one, and a directory that holds a run is
never reused without a word.

The default directory (``outputs/<date>/<time>-<name>``, a sweep's too) has one-second resolution, so
:class:`ClaimRunDir` claims it before Hydra makes it with an exclusive ``mkdir`` (atomic on shared file systems too):
one process wins, the others take ``<time>_2-<name>``, ``<time>_3-<name>``. A pattern given on the command line is
claimed the same way; a directory given as it is is used as given (a resume in place, Lightning's extra ranks), and a
new run into one holding another run's files is refused by :func:`taken_error` in the precheck.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

RUN_DIR_KEY, SWEEP_DIR_KEY = "hydra.run.dir", "hydra.sweep.dir"
JOB_DIR_RESOLVER = "runner.job_dir"
NAME_MAX_BYTES = 200  # of the file system's 255 for a name: room for the job's number and a claim's _N


def job_dir_name(override_dirname: str) -> str:
    """A sweep job's directory name from its overrides: one path component (each ``/`` a ``_``), cut to
    :data:`NAME_MAX_BYTES` with ``,...`` (the job's number keeps it unique)."""
    name = override_dirname.replace("/", "_")
    if len(name.encode()) <= NAME_MAX_BYTES:
        return name
    cut = name.encode()[:NAME_MAX_BYTES - 4].decode(errors="ignore")  # never half a UTF-8 character
    return (cut.rpartition(",")[0] or cut) + ",..."


def register_job_dir_resolver() -> None:
    """``${runner.job_dir:...}`` for conf/config.yaml's ``hydra.sweep.subdir``; idempotent."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(JOB_DIR_RESOLVER):
        OmegaConf.register_new_resolver(JOB_DIR_RESOLVER, job_dir_name)


def claim(directory: Path, name: str | None = None) -> Path:
    """Create ``directory``, or the first free ``<dir>_N`` from 2 (before ``-name`` where the name ends with it)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    stem, tail = directory.name, ""
    if name and stem.endswith(f"-{name}") and len(stem) > len(name) + 1:
        stem, tail = stem[:-len(name) - 1], f"-{name}"
    for n in range(1, 10_000):
        candidate = directory if n == 1 else directory.with_name(f"{stem}_{n}{tail}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{directory}: 10,000 runs in the same second under one name")


def _given(overrides: Sequence[str], key: str) -> str | None:
    """The value of ``key`` among command-line ``overrides`` (None: not given)."""
    for o in overrides:
        k, sep, v = o.lstrip("+").partition("=")
        if sep and k == key:
            return v.strip("'\"")
    return None


def taken_error(overrides: Sequence[str], multirun: bool = False) -> str | None:
    """Why a run may not go into the ``hydra.run.dir`` (or ``hydra.sweep.dir``) the command line names: it holds another
    run's files and this is no resume nor an extra rank. None: it may."""
    key = SWEEP_DIR_KEY if multirun else RUN_DIR_KEY
    given = _given(overrides, key)
    resuming = not multirun and _given(overrides, "ckpt_path") not in (None, "null")
    if given is None or "${" in given or resuming or os.environ.get("LOCAL_RANK", "0") != "0":
        return None  # a pattern (``outputs/${now:%H}``) is claimed as the default one is
    directory = Path(given).expanduser()
    held = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    if not held:
        return None
    what = "sweep" if multirun else "run"
    fix = "" if multirun else f", resume that run with runner resume {given} (or ckpt_path=last)"
    return (f"{key}={given} holds a {what} already ({', '.join(held[:6])}{', ...' if len(held) > 6 else ''}): a "
            f"new {what} there would mix its files with that {what}'s. Give another directory (or none: each {what} "
            f"gets its own under outputs/){fix}, or remove it first.")


class ClaimRunDir(Callback):
    """The Hydra callback (conf/config.yaml's ``hydra.callbacks``) that claims the default directory before Hydra makes
    it."""

    def on_run_start(self, config: Any, **_: Any) -> None:
        self._claim(config, RUN_DIR_KEY)

    def on_multirun_start(self, config: Any, **_: Any) -> None:
        self._claim(config, SWEEP_DIR_KEY)

    @staticmethod
    def _claim(config: Any, key: str) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf, open_dict, read_write

        from runner import hydra_internals

        given = _given(OmegaConf.to_container(config.hydra.overrides.hydra, resolve=False), key)  # type: ignore[arg-type]
        if given is not None and "${" not in given:
            return  # a directory given on the command line: used as given (taken_error checked it)
        HydraConfig.instance().set_config(config)  # what Hydra sets when the job starts: ${hydra:job.name} resolves
        name = OmegaConf.select(config, "hydra.job.name") if key == RUN_DIR_KEY else None
        claimed = str(claim(Path(str(OmegaConf.select(config, key))), name))
        with read_write(config.hydra), open_dict(config.hydra):
            OmegaConf.update(config, key, claimed)
        if key == SWEEP_DIR_KEY:
            hydra_internals.jobs_override(config, f"{key}={claimed}")  # each job's config is composed again
