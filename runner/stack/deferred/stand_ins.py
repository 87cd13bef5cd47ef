"""Python state a compiled ``training_step`` touches, kept out of the graph's guards.

Lightning's documentation teaches steps that keep Python state on the module: the epoch-end output
list (``self.training_step_outputs.append(loss)``, stacked and cleared in ``on_train_epoch_end``), a
loss history (``self.losses.append(loss.item())``), and reads of the learning rate through the trainer
(``self.trainer.optimizers[0].param_groups[0]["lr"]``). Dynamo traces a list mutation by guarding the
list's length (``len(self.training_step_outputs) == 7``) and an optimizer by guarding every value of
every param group (a per-step ``OneCycleLR`` changes ``lr`` and ``betas``): each fails on the next step,
so the step recompiles every step until ``recompile_limit``. Two stand-ins, swapped in around the
compiled step only (``DeferredLog.capture``), remove those guards:

* :class:`DeferredList` takes the place of each ``list`` attribute of the LightningModule. Mutations
  (``append``, ``extend``, ``insert``, ``clear``, ``+=``...) are recorded with ``self.log``'s calls and
  applied to the real list right after the step, in order. The real list sits in a :class:`Box`, which
  Dynamo never opens unless the step reads the list: a read sees the real list plus this step's
  recorded mutations (and guards on what it read, as any read of Python state must).
* :class:`OptimizerView` takes the place of each optimizer in the strategy's lists: the same
  ``param_groups`` (the same dicts), so a read is of one plain float, which the shape policy's
  ``specialize_float=False`` turns into a graph input after it first changes; everything else is
  forwarded to the optimizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_MUTATIONS = ("append", "extend", "insert", "clear", "remove", "sort", "reverse")


class Box:
    """Holds the real list; a compiled step records it as a call target without reading it."""

    __slots__ = ("value",)

    def __init__(self, value: list[Any]) -> None:
        self.value = value

    def __getattr__(self, name: str) -> Any:  # replay: box.append(x) is the real list's append
        return getattr(self.value, name)


class DeferredList:
    """Stands in for a ``list`` attribute of the LightningModule while the compiled step runs."""

    def __init__(self, calls: list[Any], name: str) -> None:
        self._calls = calls  # DeferredLog's list: log calls and list mutations replay in one order
        self._box = Box([])
        self._name = name

    def _record(self, method: str, *args: Any) -> None:
        self._calls.append((self._box, method, args, {}, None))

    def append(self, value: Any) -> None:
        self._record("append", value)

    def extend(self, values: Any) -> None:
        self._record("extend", list(values))

    def insert(self, index: int, value: Any) -> None:
        self._record("insert", index, value)

    def clear(self) -> None:
        self._record("clear")

    def remove(self, value: Any) -> None:
        self._record("remove", value)

    def __iadd__(self, values: Any) -> DeferredList:
        self.extend(values)
        return self

    # -- reads: the real list as it will be after this step's mutations so far --------------------------
    def _view(self) -> list[Any]:
        items = list(self._box.value)
        for target, method, args, _, _ in self._calls:
            if target is self._box:
                getattr(items, method)(*args)
        return items

    def __len__(self) -> int:
        return len(self._view())

    def __getitem__(self, index: Any) -> Any:
        return self._view()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._view())

    def __contains__(self, value: Any) -> bool:
        return value in self._view()

    def __bool__(self) -> bool:
        return bool(self._view())

    def __repr__(self) -> str:
        return repr(self._view())

    def pop(self, index: int = -1) -> Any:
        value = self._view()[index]
        self._record("pop", index)
        return value

    def count(self, value: Any) -> int:
        return self._view().count(value)

    def index(self, value: Any) -> int:
        return self._view().index(value)

    def copy(self) -> list[Any]:
        return self._view()


class OptimizerView:
    """Stands in for an optimizer in the strategy's lists while the compiled step runs."""

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer
        self.param_groups: list[dict[str, Any]] = optimizer.param_groups

    def refresh(self) -> None:
        """Follow the optimizer's current groups (``load_state_dict`` on resume replaces the list)."""
        self.param_groups = self._optimizer.param_groups

    def __getattr__(self, name: str) -> Any:  # only attributes the view does not have get here
        return getattr(self._optimizer, name)
