"""runner: declarative, config-driven PyTorch training with the torch.compile stack on every step.

``python -m runner +recipe=NAME [overrides]`` composes ``conf/`` with Hydra; ``runner.run(cfg)``
does the same from Python; ``CompileStrategy`` brings the compile stack to any Lightning Trainer.
"""

from runner.config.schema import (
    CompileConfig,
    CudaGraphsConfig,
    DynamicConfig,
    OffloadConfig,
    OptimizerPolicy,
    Scope,
    ShapePolicy,
)
from runner.strategy import CompileStrategy, DDPCompileStrategy

__all__ = [
    "CompileConfig",
    "CompileStrategy",
    "CudaGraphsConfig",
    "DDPCompileStrategy",
    "DynamicConfig",
    "OffloadConfig",
    "OptimizerPolicy",
    "Scope",
    "ShapePolicy",
]
