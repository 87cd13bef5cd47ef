#!/usr/bin/env bash
# The GPU checks of one session, as one script (docs/gpu.md, "On a GPU machine"): the quickstart with CUDA
# graphs from the command line, the gpu-marked tests, then benchmarks/gpu.py (every contestant, CUDA graphs'
# partitions and re-recordings after warm-up included). Every log goes under $OUT (default gpu-out/); a part
# that fails is logged and the next runs. The quickstart and the tests time nothing, so they run side by side
# (device time is short); the benchmark runs alone after them. GPU_BENCH_ARGS adds arguments to
# benchmarks/gpu.py, e.g. GPU_BENCH_ARGS="--models gpt_124m --rounds 1" for a session with a few minutes.
# The GPU machines have torch and Lightning but no Hydra/OmegaConf and no network: wheels placed in .whl/
# (docs/benchmarks.md says how to make them) are installed first, when present.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if compgen -G ".whl/*.whl" >/dev/null; then
  pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
part() {  # part NAME COMMAND...: run it, log it, record its exit code and wall time, go on
  local name=$1 start rc
  shift
  start=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc, $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
}
part nvidia-smi nvidia-smi
part versions python -c "import torch, lightning; print(torch.__version__, lightning.__version__, torch.cuda.get_device_name())"
# The quickstart through the CLI with CUDA graphs: its summary shows partitions in CUDA graphs, recordings,
# re-recordings and replayed steps (docs/compile.md, "Record once, replay every step").
part quickstart-cudagraphs python -m runner +recipe=quickstart trainer=gpu cudagraphs=reduce_overhead \
  trainer.max_steps=120 "hydra.run.dir=${TMPDIR:-/tmp}/runner-quickstart-cudagraphs" &
part pytest-gpu python -m pytest -m gpu -q -p no:cacheprovider -n 4 --timeout 300 -W ignore::DeprecationWarning &
wait
# shellcheck disable=SC2086  # GPU_BENCH_ARGS is a list of arguments
part bench-gpu python benchmarks/gpu.py --out "$OUT/gpu.json" ${GPU_BENCH_ARGS:-}
