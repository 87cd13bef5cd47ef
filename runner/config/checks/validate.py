"""The one place a composed config is validated: every cross-group check, then the warnings.

The checks live beside this module, grouped by what they look at: ``stack`` (compile, dynamic, offload, CUDA
graphs), ``run`` (trainer, data, model sizes, paths, ranges), ``fsdp`` (sharded parameters), ``inputs`` (what a user
types: paths, devices, checkpoints, recipe fields), ``data`` (the data against the model: token ids and the
embedding), ``peft`` (the adapter against the model), ``objective`` (a preference objective against its data and
reference), ``loss`` (a chunked loss against the model's output layer) and ``push`` (a push to the Hugging Face Hub:
its repo id, a token, an export to push).
``validate`` runs them all and raises one ``ConfigError`` listing every problem, each naming the key and the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from runner.config.checks import data, fsdp, inputs, loss, objective, peft, push, run, stack
from runner.config.errors import ConfigError
from runner.config.schema import RunConfig

log = logging.getLogger(__name__)

Check = Callable[[RunConfig], "str | None"]


def all_checks() -> list[Check]:
    """Every check, in the order their messages are reported."""
    return [*run.CHECKS, *stack.CHECKS, *fsdp.CHECKS, *inputs.CHECKS, *data.CHECKS, *peft.CHECKS, *objective.CHECKS,
            *loss.CHECKS, *push.CHECKS]


_warned: set[str] = set()


def already_said(message: str) -> bool:
    """Whether ``message`` was logged as a config warning in this process (a builder that finds the same thing at
    fit time says it only where no check did: a user's own ``Trainer``)."""
    return message in _warned


def emit_warnings(cfg: RunConfig) -> list[str]:
    """Log each warning once per process (the config is loaded twice: precheck, then the run)."""
    messages = [msg for check in (*stack.WARNINGS, *loss.WARNINGS) if (msg := check(cfg))]
    for msg in messages:
        if msg not in _warned:
            _warned.add(msg)
            log.warning("config warning: %s", msg)
    return messages


def validate(cfg: RunConfig) -> None:
    """Raise ``ConfigError`` naming every impossible setting or combination, with its fix."""
    problems = [msg for check in all_checks() if (msg := check(cfg))]
    if problems:
        raise ConfigError(" ".join(problems))
    emit_warnings(cfg)  # e.g. CUDA graphs on a CPU: logged once, the run goes on
