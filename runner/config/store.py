"""Register the typed schemas with Hydra's ConfigStore.

The root schema (``runner_schema``) comes first in ``conf/config.yaml``'s defaults, so every group
option merged after it is checked against its dataclass. Open ``_target_`` groups register one
schema per shipped option (``<option>_schema``), which that option's YAML extends.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from runner.config import targets
from runner.config.schema import RunConfig

_TARGET_SCHEMAS: dict[str, dict[str, type]] = {
    "model": {"gpt": targets.GPTSchema, "mlp": targets.MLPSchema},
    "data": {"text": targets.TextDataSchema, "synthetic": targets.SyntheticDataSchema},
    "optimizer": {"adamw": targets.AdamWSchema, "sgd": targets.SGDSchema},
    "scheduler": {"warmup_cosine": targets.WarmupCosineSchema},
    "logger": {
        "csv": targets.CSVLoggerSchema,
        "wandb": targets.WandbLoggerSchema,
        "tensorboard": targets.TensorBoardLoggerSchema,
    },
}


def register_configs() -> None:
    """Store every schema; idempotent (the store is keyed by group and name)."""
    cs = ConfigStore.instance()
    cs.store(name="runner_schema", node=RunConfig)
    for group, schemas in _TARGET_SCHEMAS.items():
        for option, schema in schemas.items():
            # Loggers live side by side under logger.<name>; the others are the group node itself.
            node = {option: schema} if group == "logger" else schema
            cs.store(group=group, name=f"{option}_schema", node=node)
