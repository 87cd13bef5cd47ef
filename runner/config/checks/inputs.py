"""Checks of what a user types beyond a value's type: paths, device counts, checkpoints, the classes ``_target_`` names
and their fields (a check that needs something missing leaves it to the check that names that)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from runner.config import target_objects
from runner.config.decisions.peft import state_shapes
from runner.config.errors import close_matches
from runner.config.schema import RunConfig
from runner.config.target_objects import fields as _fields

_GROUPS = ("model", "data", "optimizer", "scheduler")
_CKPT_KEYWORDS = ("last", "best", "hpc", "registry")


def check_targets(cfg: RunConfig) -> str | None:
    """Every logger entry has a ``_target_`` (a misspelt ``+logger.csvv.key=v`` has none), and every ``_target_``
    imports (a typo, or a package not importable from here)."""
    named = [n for n, node in cfg.logger.items() if isinstance(_fields(node).get("_target_"), str)]
    for name, node in cfg.logger.items():
        if name not in named:
            matches = close_matches(name, named)
            fix = f"did you mean `logger.{matches[0]}`? " if matches else ""
            return (f"logger.{name} has no _target_ (its keys: {', '.join(map(str, _fields(node))) or 'none'}): "
                    f"{fix}A logger names its class (`_target_: package.Logger`, as conf/logger/*.yaml do; "
                    f"`runner --help` lists the logger options), or drop the entry (~logger.{name}).")
    nodes = [*((g, getattr(cfg, g)) for g in _GROUPS), *((f"logger.{n}", node) for n, node in cfg.logger.items())]
    for group, node in nodes:
        target = _fields(node).get("_target_")
        if not isinstance(target, str):
            continue
        _, error = target_objects.locate(target)
        if isinstance(error, target_objects.ImportFailure):
            return error.message(f"{group}._target_={target}", target)
        if error is not None:
            return (f"{group}._target_={target} cannot be imported ({error}). Check the dotted path "
                    f"(package.module.Class); a class of your own must be importable from here: run runner "
                    f"from the directory that holds its package ({Path.cwd()} is on the path), or "
                    "`pip install -e` that package.")
    return None


def _unexpected(obj: Any, fields: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Fields ``obj``'s signature does not take, and the parameters it does take."""
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return [], []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return [], []
    names = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL and n != "self"]
    return [k for k in fields if k not in target_objects.HYDRA_KEYS and k not in names], names


def check_target_fields(cfg: RunConfig) -> str | None:
    """Every field of a group node is an argument its class takes: a recipe's ``model.n_layer`` must not reach another
    model."""
    for group in _GROUPS:
        fields = _fields(getattr(cfg, group))
        target = fields.get("_target_")
        obj = target_objects.locate(target)[0] if isinstance(target, str) else None
        if obj is None:
            continue
        extra, takes = _unexpected(obj, fields)
        if extra:
            source = f"recipe {cfg.recipe} or the command line" if cfg.recipe else "the command line"
            shown = ", ".join(f"{group}.{k}={fields[k]}" for k in extra)
            return (f"{shown}: {target} (the selected {group}) takes no argument {', '.join(extra)} "
                    f"(it takes: {', '.join(takes) or 'nothing'}). It is set by {source}, for "
                    f"another {group}. Drop it (~{group}.{extra[0]}), or keep {group}-specific settings in a "
                    f"conf/{group}/NAME.yaml option that the recipe selects (`override /{group}: NAME`).")
    return None


def _own_check(group: str, cfg: RunConfig) -> str | None:
    """The ``check_arguments`` of the class ``group._target_`` names, called with the group's fields, if it has one."""
    message = target_objects.declared(getattr(cfg, group), "check_arguments")
    return message if isinstance(message, str) else None


def check_data_arguments(cfg: RunConfig) -> str | None:
    """The data module's own check of its arguments (``check_arguments``), a user's data module's too."""
    return _own_check("data", cfg)


def check_model_arguments(cfg: RunConfig) -> str | None:
    """The model's own check of its arguments, before the meta-device build, which would fail without words on them."""
    return _own_check("model", cfg)


def check_devices(cfg: RunConfig) -> str | None:
    """``trainer.devices`` is a count the accelerator has (lists of CUDA indices: ``check_accelerator``)."""
    devices, accelerator = cfg.trainer.devices, cfg.trainer.accelerator
    if accelerator not in ("cpu", "cuda", "gpu", "auto") or devices == "auto":
        return None  # mps and others: Lightning's own checks; devices=auto: Lightning's pick
    if isinstance(devices, (list, tuple)) and accelerator != "cpu":
        return None
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        devices = int(devices)
    count = _cuda_count()
    if accelerator == "cpu" or (accelerator == "auto" and not count):
        if isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1:
            return None
        return (f"trainer.devices={devices!r} on the CPU: give a number of processes >= 1 "
                "(trainer.devices=2 trains with two DDP processes over gloo), or trainer.devices=auto.")
    if count == 0:
        return None  # no CUDA device at all: check_accelerator says so
    if isinstance(devices, int) and not isinstance(devices, bool) and (devices == -1 or 1 <= devices <= count):
        return None
    return (f"trainer.devices={devices!r} on trainer.accelerator={accelerator}, which has {count} device(s): "
            f"give a count from 1 to {count}, -1 for all, or a list of device indices (trainer.devices=[0]).")


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _multi_node_launch() -> bool:
    """Whether a launcher (torchrun, SLURM, LSF, MPI, a manual launch's env vars) started this process as one node."""
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    if any(k in os.environ for k in ("NODE_RANK", "GROUP_RANK", "WORLD_SIZE")):
        return True
    return any(env.detect() for env in (SLURMEnvironment, TorchElasticEnvironment, LSFEnvironment, MPIEnvironment))


def check_num_nodes(cfg: RunConfig) -> str | None:
    """``trainer.num_nodes`` >= 1, and > 1 only under a multi-node launcher (else it waits forever)."""
    n = cfg.trainer.num_nodes
    if n < 1:
        return f"trainer.num_nodes={n}: give the number of machines, >= 1 (1 for this machine alone)."
    if n > 1 and not _multi_node_launch():
        return (f"trainer.num_nodes={n}, but this process was not started as one node of {n} (no torchrun, "
                "SLURM, LSF or MPI environment, no NODE_RANK): it would wait for the other nodes forever. "
                f"Start runner on each node with a launcher (torchrun --nnodes={n} --node-rank=I -m runner ...) "
                "or with MASTER_ADDR, MASTER_PORT and NODE_RANK set, or train on this machine with "
                "trainer.num_nodes=1.")
    return None


def read_checkpoint(path: Path) -> tuple[Any, str | None]:
    """The object a checkpoint file holds and None, or None and why torch cannot load it (Type: first line)."""
    import torch

    try:  # mmap: only the pickled structure is read, not the tensors
        return torch.load(path, map_location="cpu", weights_only=False, mmap=True), None
    except Exception:
        pass
    try:
        return torch.load(path, map_location="cpu", weights_only=False), None
    except Exception as e:
        return None, target_objects.error_text(e)


def _expected_state(cfg: RunConfig) -> dict[str, tuple[int, ...]] | None:
    """Parameter and buffer shapes of the configured model on the meta device; None when it cannot be built that way."""
    import lightning as L
    import torch

    model = target_objects.meta_model(cfg.model)
    if not isinstance(model, torch.nn.Module):
        return None
    prefix = "" if isinstance(model, L.LightningModule) else "model."  # runner's TrainModule holds it as .model
    return state_shapes(model, cfg.peft, prefix)  # with the adapter's weights under peft=lora|qlora


def _compare(saved: dict[str, Any], expected: dict[str, tuple[int, ...]]) -> str | None:
    shaped = {k: tuple(v.shape) for k, v in saved.items() if hasattr(v, "shape")}
    missing = [k for k in expected if k not in shaped]
    unexpected = [k for k in shaped if k not in expected]
    different = [k for k in expected if k in shaped and shaped[k] != expected[k]]
    if not (missing or unexpected or different):
        return None
    parts = []
    if different:
        k = different[0]
        parts.append(f"{len(different)} weight(s) differ in shape (e.g. {k}: {list(shaped[k])} in the checkpoint, "
                     f"{list(expected[k])} in this model)")
    if missing:
        parts.append(f"{len(missing)} of this model's weights are not in it (e.g. {missing[0]})")
    if unexpected:
        parts.append(f"{len(unexpected)} of its weights are not in this model (e.g. {unexpected[0]})")
    return "; ".join(parts)


def check_ckpt_path(cfg: RunConfig) -> str | None:
    """``ckpt_path`` exists and is a Lightning checkpoint of the configured model."""
    value = cfg.ckpt_path
    if value is None or value in _CKPT_KEYWORDS or "://" in value:
        return None
    path = Path(value).expanduser()
    if not path.exists():
        return (f"ckpt_path={value} does not exist. Give an existing .ckpt file, or resume a run in place with "
                "hydra.run.dir=<its run dir> ckpt_path=last.")
    fix = ("Give the checkpoints/last.ckpt of an earlier run, or resume a run in place with "
           "hydra.run.dir=<its run dir> ckpt_path=last.")
    if path.is_dir() and (path / "meta.pt").is_file():
        return None  # a sharded checkpoint (trainer.distributed=fsdp): one file per rank and meta.pt
    if path.is_dir():
        last = path / "checkpoints" / "last.ckpt"  # a run directory
        hint = f" (did you mean ckpt_path={last}?)" if last.is_file() else ""
        return f"ckpt_path={value} is a directory, not a checkpoint file{hint}. {fix}"
    ckpt, error = read_checkpoint(path)
    if error is not None:
        return f"ckpt_path={value} is not a checkpoint torch can load ({error}). {fix}"
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        keys = ", ".join(map(str, list(ckpt)[:5])) if isinstance(ckpt, dict) else type(ckpt).__name__
        return (f"ckpt_path={value} is not a Lightning checkpoint (no 'state_dict'; it holds: {keys}). A bare "
                f"model state dict cannot resume a run. {fix}")
    expected = _expected_state(cfg)
    mismatch = None if expected is None else _compare(ckpt["state_dict"], expected)
    if mismatch is not None:
        target = _fields(cfg.model).get("_target_", "?")
        return (f"ckpt_path={value} belongs to another model than the selected one ({target}): {mismatch}. "
                "Resume with the settings it was trained with (its run's .hydra/overrides.yaml lists them, "
                "e.g. the same +recipe=NAME), or train from scratch without ckpt_path.")
    return None


def check_trainable_parameters(cfg: RunConfig) -> str | None:
    """A plain ``nn.Module`` has a parameter to train (torch refuses an empty optimizer only once the run started)."""
    import lightning as L
    import torch

    model = target_objects.meta_model(cfg.model)
    if not isinstance(model, torch.nn.Module) or isinstance(model, L.LightningModule):
        return None
    params = list(model.parameters())
    if any(p.requires_grad for p in params):
        return None
    has = f"all {len(params)} of its parameters have requires_grad=False" if params else "it has no parameters"
    target = _fields(cfg.model).get("_target_", "?")
    optimizer = _fields(cfg.optimizer).get("_target_", "the optimizer")
    return (f"model._target_={target} has nothing to train ({has}): runner trains the model with "
            f"{optimizer} over its trainable parameters, and an optimizer needs at least one. Select a model "
            "with parameters (model=gpt, model=mlp, or model=custom with model._target_ naming your nn.Module), "
            "or leave some of its parameters trainable.")


CHECKS = [
    check_targets,
    check_target_fields,
    check_data_arguments,
    check_model_arguments,
    check_trainable_parameters,
    check_devices,
    check_num_nodes,
    check_ckpt_path,
]
