"""``CallbackGroup``: several Lightning callbacks behind one, so each hook event is dispatched once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lightning.pytorch.callbacks import Callback

from runner.metrics import collect_figures

# Every hook Lightning calls on a callback (lightning.pytorch.callbacks.Callback, 2.6), but the checkpoint
# state ones, which the group implements itself.
_HOOKS = tuple(name for name, value in vars(Callback).items()
               if callable(value) and name.startswith(("on_", "setup", "teardown"))
               and name not in ("on_save_checkpoint", "on_load_checkpoint"))


class CallbackGroup(Callback):
    """One callback that forwards each hook to the members implementing it (see the module docstring)."""

    def __init__(self, *members: Callback) -> None:
        self.members = list(members)
        # Lightning names every hook's profiler span after the state key: built once, not on every call.
        self._state_key = "CallbackGroup[" + ",".join(m.state_key for m in self.members) + "]"
        for hook in _HOOKS:
            calls = [getattr(m, hook) for m in self.members if _implements(m, hook)]
            if calls:
                setattr(self, hook, _fan_out(calls))  # an instance attribute: what Lightning looks up

    def __iter__(self) -> Iterator[Callback]:
        return iter(self.members)

    def find(self, kind: type[Callback]) -> Any:
        """The member of type ``kind`` (None if there is none)."""
        return next((m for m in self.members if isinstance(m, kind)), None)

    @property
    def state_key(self) -> str:
        return self._state_key

    def state_dict(self) -> dict[str, Any]:
        return {m.state_key: state for m in self.members if (state := m.state_dict())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for m in self.members:
            if m.state_key in state_dict:
                m.load_state_dict(state_dict[m.state_key])

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        for m in self.members:
            if _implements(m, "on_save_checkpoint"):
                m.on_save_checkpoint(trainer, pl_module, checkpoint)

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("callbacks", {})
        if self.state_key not in saved:  # written before the group: each member's state at the top level
            for m in self.members:
                if m.state_key in saved:
                    m.load_state_dict(saved[m.state_key])
        for m in self.members:
            if _implements(m, "on_load_checkpoint"):
                m.on_load_checkpoint(trainer, pl_module, checkpoint)

    def figures(self) -> dict[str, Any]:
        """Every member's figures, merged in order."""
        return collect_figures(self.members)


def _implements(callback: Callback, hook: str) -> bool:
    return getattr(type(callback), hook, None) is not getattr(Callback, hook, None) or hook in vars(callback)


def _fan_out(calls: list[Callable[..., Any]]) -> Callable[..., None]:
    if len(calls) == 1:
        return calls[0]

    def call_each(*args: Any, **kwargs: Any) -> None:
        for call in calls:
            call(*args, **kwargs)

    return call_each


def find_callback(trainer: Any, kind: type[Callback]) -> Any:
    """The trainer's callback of type ``kind``, standing alone or in a :class:`CallbackGroup` (None if none)."""
    for callback in trainer.callbacks:
        found = callback.find(kind) if isinstance(callback, CallbackGroup) else callback
        if isinstance(found, kind):
            return found
    return None
