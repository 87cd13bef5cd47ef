"""The one place a composed config is validated: every check, in the order their messages are reported."""

from __future__ import annotations

from collections.abc import Callable

from runner.config.checks import data, inputs, objective, push, run
from runner.config.decisions import loss, peft, stack
from runner.config.errors import ConfigError
from runner.config.schema import RunConfig

CHECKS: list[Callable[[RunConfig], str | None]] = [*run.CHECKS, *stack.CHECKS, *inputs.CHECKS, *data.CHECKS,
                                                   *peft.CHECKS, *objective.CHECKS, *loss.CHECKS, *push.CHECKS]


def notes(cfg: RunConfig) -> list[str]:
    """What the config will not do as it says (CUDA graphs on a CPU): the run goes on, its job says them once."""
    return [msg for note in (*stack.NOTES, *loss.NOTES) if (msg := note(cfg))]


def validate(cfg: RunConfig) -> None:
    """Raise ``ConfigError`` naming every impossible setting or combination, with its fix; silent otherwise (only the
    job says the notes)."""
    problems = [msg for check in CHECKS if (msg := check(cfg))]
    if problems:
        raise ConfigError(" ".join(problems))
