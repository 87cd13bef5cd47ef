"""``python -m runner +recipe=NAME [overrides]``; ``python -m runner --list-recipes``.

The config is composed and validated once before Hydra's own entry point runs, so a bad key, value
or combination is reported in one paragraph and nothing (not even a run directory) is written.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from runner.config import CONF_DIR, ConfigError, load, recipes
from runner.config.precheck import precheck
from runner.config.store import register_configs


def _list_recipes() -> None:
    items = recipes()
    width = max(len(n) for n in items)
    print("recipes (use: python -m runner +recipe=NAME):")
    for name, desc in items.items():
        print(f"  {name:<{width}}  {desc}")


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> None:
    from runner.errors import RunStopped
    from runner.run import run

    try:
        result = run(load(cfg))
    except RunStopped as e:  # a compile failure or a non-finite loss: the message says it all
        print(f"runner: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    if result.exit_code:  # stopped by SIGINT/SIGTERM after saving last.ckpt: 128+signum
        sys.exit(result.exit_code)


def main() -> None:
    if "--list-recipes" in sys.argv[1:]:
        _list_recipes()
        return
    register_configs()
    try:
        precheck(sys.argv[1:])
    except ConfigError as e:
        print(f"runner: {e}", file=sys.stderr)
        sys.exit(2)
    _hydra_main()


if __name__ == "__main__":
    main()
