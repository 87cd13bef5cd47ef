"""Config: ``schema`` (typed nodes), ``decisions`` (each decision one function, called before the run and by the fit),
``checks`` and ``composing`` (command line and YAML through Hydra to a validated ``RunConfig``). ``compose`` and
``load`` import Hydra when first used: a ``CompileStrategy`` in a user's own Trainer imports none of it."""

from typing import Any

from runner.config.composing.layers import CONF_DIR, recipes
from runner.config.errors import ConfigError
from runner.config.schema import RunConfig

__all__ = ["CONF_DIR", "ConfigError", "RunConfig", "compose", "load", "recipes"]


def __getattr__(name: str) -> Any:
    if name in ("compose", "load"):
        from runner.config.composing import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'runner.config' has no attribute {name!r}")
