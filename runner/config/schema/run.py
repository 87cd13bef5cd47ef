"""The root of the config, ``RunConfig``, and the nodes of the run itself: ``compile``, ``cudagraphs``, ``dynamic``,
``offload``, ``trainer``, ``telemetry``, ``reliability``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from runner.config.schema.after import AfterConfig, EvalConfig
from runner.config.schema.fsdp import Distributed, FsdpConfig
from runner.config.schema.loss import LossConfig
from runner.config.schema.objective import ObjectiveConfig
from runner.config.schema.options import OffloadStrategy, Scope, ShapePolicy
from runner.config.schema.peft import PeftConfig


class OptimizerPolicy(Enum):
    """How the optimizer step runs."""

    none = "none"  # the optimizer as configured, eager
    compiled = "compiled"  # optimizer.step traced by Dynamo, tensor learning rate
    fused = "fused"  # the optimizer's fused kernel (fused=True), eager
    graphed = "graphed"  # clipping, the non-finite skip, the fused update and zeroing as one graph-safe function
    auto = "auto"  # the fastest correct choice for the device; the choice is logged


# ``raise`` is a keyword, and OmegaConf matches enum members by name: the functional form allows it.
# What a compile failure does. auto (the default) is torch.compile's own behaviour plus runner's advice: an error
# compiling a frame stops the run with the frame, the reason and the fix named; a frame that keeps recompiling is
# demoted after its second recompile on the same guard (compile/demoted) or, at torch's recompile limit, runs eagerly
# with a warning. raise is strict: a recompile-limit hit stops the run too, and nothing is demoted. eager runs any frame
# that fails to compile eagerly, counts it in compile/fallbacks and goes on.
OnError = Enum("OnError", {"auto": "auto", "raise": "raise", "eager": "eager"})


class Background(Enum):
    """Where the compile runs: beside the run in a second process while the run trains eagerly, or in it."""

    auto = "auto"  # beside on a spare core, or on one core for long runs; switch only when it pays
    shared = "shared"  # beside, on every core at normal priority; switch as soon as it is ready
    pinned = "pinned"  # beside, pinned to one core at normal priority; switch as soon as it is ready
    disabled = "disabled"  # inside the first training step (torch.compile's own behaviour)


class CacheTrust(Enum):
    """Which entries of torch's compile caches torch may read (the shared server's and another run's artifacts)."""

    signed = "signed"  # only what verifies under RUNNER_COMPILE_CACHE_SECRET (or ..._FILE), which must then be set
    # torch's own unchecked sharing: whoever can write the server or the file runs code in every process that reads it
    unsigned = "unsigned"


class AfterWarmup(Enum):
    """What a recompile after warm-up does."""

    none = "none"  # recompile as usual
    fail_on_recompile = "fail_on_recompile"  # raise, naming the guard that failed
    eager_on_recompile = "eager_on_recompile"  # run the new shape eagerly instead


class CudaGraphMode(Enum):
    """CUDA-graph capture of the compiled graphs."""

    disabled = "disabled"
    reduce_overhead = "reduce_overhead"  # Inductor's CUDA-graph trees (mode="reduce-overhead") on every CUDA device
    # reduce_overhead where the step is eligible (runner.config.decisions.stack.cudagraphs_decision), else off with the
    # reason (always on the CPU)
    auto = "auto"


@dataclass
class CompileConfig:
    """The ``compile`` group: what is compiled and how."""

    scope: Scope = Scope.step  # What to compile: none, model, step, step_backward or blocks.
    backend: str = "inductor"  # torch.compile backend: inductor, aot_eager, eager (Dynamo capture, no codegen), ...
    # Inductor mode (default, max-autotune-no-cudagraphs, ...); CUDA graphs use the cudagraphs group.
    mode: Optional[str] = None
    fullgraph: bool = False  # Fail on any graph break instead of splitting the graph.
    # Extra Inductor options passed through to torch.compile(options=...). On the CPU they go on top of runner's own
    # (runner.stack.compiling.plan.CPU_INDUCTOR_OPTIONS, logged as compile/options).
    options: dict[str, Any] = field(default_factory=dict)
    optimizer: OptimizerPolicy = OptimizerPolicy.auto  # How the optimizer step runs.
    compiled_autograd: bool = False  # Capture the whole backward (with user gradient hooks) through compiled autograd.
    # For scope=blocks: class names of the repeated blocks; empty finds the largest ModuleList.
    block_types: list[str] = field(default_factory=list)
    on_error: OnError = OnError["auto"]  # type: ignore[valid-type]  # What a compile failure does: auto, raise, eager.
    cache_dir: Optional[str] = None  # Inductor/AOTAutograd on-disk cache directory; None keeps torch's default.
    # A compile cache shared by every process of the run, its ranks and sweeps: redis://HOST:PORT (or .../DB),
    # Inductor's and AOTAutograd's remote caches on a Redis server (docs/compile-cache.md).
    cache: Optional[str] = None
    # What torch may read from the shared cache and another run's cache artifacts: signed or unsigned (CacheTrust).
    cache_trust: CacheTrust = CacheTrust.signed
    # Compile in a second process while the first steps train eagerly, then switch (docs/background-compile.md): auto
    # (Inductor, one process: a long CPU run, a GPU with memory to spare; see the doc), shared, pinned, disabled.
    background: Background = Background.auto


@dataclass
class CudaGraphsConfig:
    """The ``cudagraphs`` group."""

    mode: CudaGraphMode = CudaGraphMode.auto  # auto (always off on the CPU), reduce_overhead or disabled.
    # Leave nodes that use a dynamic size out of CUDA graphs, graph the rest; false: a graph per size.
    skip_dynamic_graphs: bool = True
    warmup_steps: int = 3  # Steps run before the first capture.


@dataclass
class DynamicConfig:
    """The ``dynamic`` group: the shape policy for inputs whose sizes vary."""

    policy: ShapePolicy = ShapePolicy.automatic
    # For policy=bucket: the padded lengths (sorted, the last >= the longest sequence).
    buckets: list[int] = field(default_factory=list)
    # Dims of every input tensor that vary (1 = sequence length of a [batch, seq] batch).
    dims: list[int] = field(default_factory=lambda: [1])
    min: int = 2  # Lower bound given to mark_dynamic.
    # Upper bound given to mark_dynamic (None: the data's seq_len, the longest batch it makes).
    max: Optional[int] = None
    # True makes every Python float a compiled frame reads a guarded constant (a learning rate read in the step then
    # recompiles at every change). False (the default): a float is a constant until it first changes, then a graph input
    # (one recompile), through torch's automatic dynamic.
    specialize_float: bool = False
    recompile_limit: int = 8  # torch._dynamo.config.recompile_limit.
    after_warmup: AfterWarmup = AfterWarmup.none  # What a recompile after warmup_steps does.
    warmup_steps: int = 10  # Steps after which after_warmup takes effect.
    compiler_collectives: bool = True  # Under DDP, make every rank take the same dynamic-shape decision.


@dataclass
class OffloadConfig:
    """The ``offload`` group: saved-activation strategy."""

    strategy: OffloadStrategy = OffloadStrategy.none
    min_bytes: int = 1024  # Saved tensors smaller than this are left alone.
    # Module names (prefix match) whose activations are left alone, e.g. the output head.
    exclude: list[str] = field(default_factory=lambda: ["head"])
    # For strategy=checkpoint: None checkpoints every block; a value in (0, 1) uses the compiler's activation memory
    # budget instead.
    memory_budget: Optional[float] = None
    measure: bool = True  # Measure saved bytes and gradient error against none on a check batch at the start.


@dataclass
class TrainerConfig:
    """The ``trainer`` group: arguments to ``lightning.Trainer`` that runner manages."""

    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    # auto (one device: single; more: ddp), ddp, or fsdp (FSDP2, sharded; settings in trainer.fsdp).
    distributed: Distributed = Distributed.auto
    fsdp: FsdpConfig = field(default_factory=FsdpConfig)  # FSDP2 settings, used with distributed=fsdp.
    precision: str = "32-true"
    max_steps: int = 200
    max_time: Optional[str] = None  # Wall-clock limit, DD:HH:MM:SS.
    val_check_interval: int = 100
    limit_val_batches: int = 20
    log_every_n_steps: int = 10
    gradient_clip_val: Optional[float] = 1.0
    accumulate_grad_batches: int = 1
    enable_progress_bar: bool = True
    deterministic: bool = False
    checkpoint_every_n_steps: int = 100  # Save last.ckpt (atomically) every N steps and at the end.

    def is_distributed(self) -> bool:
        """Whether this trainer runs DDP: asked for, or more than one device or node."""
        d = self.devices
        many = (isinstance(d, int) and (d > 1 or d == -1)) or (isinstance(d, (list, tuple)) and len(d) > 1)
        return self.distributed is not Distributed.auto or many or self.num_nodes > 1

    @property
    def sharded(self) -> bool:
        """Whether this trainer runs FSDP2 (``distributed=fsdp``)."""
        return self.distributed is Distributed.fsdp

    def single_device(self) -> str:
        """The device of a one-device run, as the user named it: ``cpu``, ``cuda:<index>`` (the index
        from ``devices=[k]``, else 0), ``mps``; ``auto`` picks CUDA, then MPS, then the CPU."""
        acc = self.accelerator
        if acc == "auto":
            import torch

            acc = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
        if acc in ("cuda", "gpu"):
            d = self.devices
            index = int(d[0]) if isinstance(d, (list, tuple)) and d else 0
            return f"cuda:{index}"
        return acc


@dataclass
class TelemetryConfig:
    """The ``telemetry`` group: what is measured about compilation."""

    log_every_n_steps: int = 10
    # Eager + compiled step pairs, interleaved after warm-up, that measure the speedup (0 disables).
    speedup_steps: int = 20
    # Device peak for MFU in TFLOP/s (reported as given); None measures it at start-up with a short matmul probe on the
    # run's device in the run's precision, cached per machine in $RUNNER_CACHE_DIR (default $XDG_CACHE_HOME/runner or
    # ~/.cache/runner)/peak_tflops.json.
    peak_tflops: Optional[float] = None
    # Write torch's structured compile trace (TORCH_TRACE) into <run_dir>/trace and, with tlparse installed, its HTML
    # compile report into <run_dir>/tlparse/index.html (linked from report.md).
    trace: bool = False


class OnNonFinite(Enum):
    """What a non-finite (nan/inf) training loss does."""

    stop = "stop"  # save the last good state to last.ckpt and stop, naming the step
    skip = "skip"  # drop that step (no optimizer update) and go on, up to max_skipped_steps


@dataclass
class ReliabilityConfig:
    """The ``reliability`` group: non-finite losses, interruption and compile-cache artifacts."""

    # A nan/inf loss stops the run (checkpointing the last good state) or skips that step.
    on_nonfinite: OnNonFinite = OnNonFinite.stop
    max_skipped_steps: int = 10  # With on_nonfinite=skip: stop (as with stop) once this many steps have been skipped.
    # SIGINT/SIGTERM finish the current step, save last.ckpt, flush loggers and exit 128+signum.
    checkpoint_on_interrupt: bool = True
    # Save torch.compiler.save_cache_artifacts() to <run_dir>/compile_cache/artifacts.bin at the end.
    save_cache_artifacts: bool = True
    # An artifacts.bin (or the run dir holding one) from another run, loaded before compiling.
    load_cache_artifacts: Optional[str] = None


@dataclass
class RunConfig:
    """The root config."""

    model: Any = None
    data: Any = None
    optimizer: Any = None
    scheduler: Any = None
    compile: CompileConfig = field(default_factory=CompileConfig)
    dynamic: DynamicConfig = field(default_factory=DynamicConfig)
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    cudagraphs: CudaGraphsConfig = field(default_factory=CudaGraphsConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    reliability: ReliabilityConfig = field(default_factory=ReliabilityConfig)
    peft: PeftConfig = field(default_factory=PeftConfig)  # which weights train (runner.config.schema.peft)
    # What the training step minimises: sft, or a preference objective (runner.config.schema.objective).
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    loss: LossConfig = field(default_factory=LossConfig)  # full or chunked logits (runner.config.schema.loss)
    # What the run leaves for after training: the exported model, a sample of a causal LM's text.
    after: AfterConfig = field(default_factory=AfterConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)  # answers scored while training (eval.generate_every_n_steps)
    # Lightning loggers by name, each a _target_ node; CSV is always added.
    logger: dict[str, Any] = field(default_factory=dict)
    seed: int = 1234
    ckpt_path: Optional[str] = None  # Checkpoint to resume from: a path, or last for this run dir's last checkpoint.
    run_dir: str = "."  # Filled by Hydra with the run directory.
    name: str = "run"
    recipe: Optional[str] = None  # Name of the recipe that was applied, if any.
