"""The one place a composed config is validated: every cross-group check, then the warnings.

The checks live beside this module, grouped by what they look at: ``checks_stack`` (compile,
dynamic, offload, CUDA graphs), ``checks_run`` (trainer, data, model sizes, paths, ranges),
``input_checks`` (what a user types: paths, devices, checkpoints, recipe fields), ``checks_data`` (the data
against the model: token ids and the embedding), ``checks_peft`` (the adapter against the model),
``checks_objective`` (a preference objective against its data and reference) and ``checks_loss`` (a chunked loss
against the model's output layer).
``validate`` runs them all and raises one ``ConfigError`` listing every problem, each naming the key and the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from runner.config import (
    checks_data,
    checks_fsdp,
    checks_loss,
    checks_objective,
    checks_peft,
    checks_run,
    checks_stack,
    input_checks,
)
from runner.config.errors import ConfigError
from runner.config.schema import RunConfig

log = logging.getLogger(__name__)

Check = Callable[[RunConfig], "str | None"]


def all_checks() -> list[Check]:
    """Every check, in the order their messages are reported."""
    return [*checks_run.CHECKS, *checks_stack.CHECKS, *checks_fsdp.CHECKS, *input_checks.CHECKS, *checks_data.CHECKS,
            *checks_peft.CHECKS, *checks_objective.CHECKS, *checks_loss.CHECKS]


_warned: set[str] = set()


def already_said(message: str) -> bool:
    """Whether ``message`` was logged as a config warning in this process (a builder that finds the same thing at
    fit time says it only where no check did: a user's own ``Trainer``)."""
    return message in _warned


def emit_warnings(cfg: RunConfig) -> list[str]:
    """Log each warning once per process (the config is loaded twice: precheck, then the run)."""
    messages = [msg for check in (*checks_stack.WARNINGS, *checks_loss.WARNINGS) if (msg := check(cfg))]
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
