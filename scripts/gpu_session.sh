#!/usr/bin/env bash
# One GPU session as one script (docs/gpu.md, "On a GPU machine"): the checks, then the measurements that fit.
#
#   scripts/gpu_session.sh --budget SECONDS   # on a GPU machine: checks, then workloads within SECONDS in all
#   scripts/gpu_session.sh --budget S --no-checks  # a second command of the same session: workloads only
#   scripts/gpu_session.sh --dry-run          # here, on the CPU: every part with --quick in a GPU-like venv
#
# Checks (they time nothing, so they run side by side): the quickstart from the command line with CUDA graphs
# (its summary shows partitions in CUDA graphs, recordings, re-recordings, replayed steps) and the gpu-marked
# tests. Then benchmarks/gpu.py runs the workloads in order of need within what is left of the budget (less a
# margin for the script's own exit), each workload's rows written to $OUT/rows/WORKLOAD.json as each contestant
# finishes, so a session cut short keeps what it measured; fold them in afterwards with
# `python benchmarks/gpu.py --merge gpu-out/rows/*.json` and commit benchmarks/results/gpu.json and docs/gpu.md.
# Every log goes under $OUT (default gpu-out/; gpu-out/dry/ for a dry run), one line per part in summary.txt; a
# part that fails is logged and the next one runs; the exit code is 1 when any part failed.
#
# The GPU machines have Python 3.12, torch, Lightning, pytest, pytest-xdist and pytest-timeout, and no network:
# the wheels in .whl/ (scripts/gpu_wheels.sh makes them, in parts .whl/1, .whl/2, ...) are installed into a
# directory of their own first. --dry-run runs every part with --quick (the quickstart as the smoke recipe, the
# gpu tests collected and skipped) in the venv gpu_wheels.sh builds: only what the GPU machines have, plus .whl/.
# GPU_BENCH_ARGS adds arguments to benchmarks/gpu.py (e.g. "--workloads memory").
set -u
BUDGET=540
CHECKS=1
DRY=0
while [ $# -gt 0 ]; do
  case $1 in
    --budget) BUDGET=$2; shift 2 ;;
    --no-checks) CHECKS=0; shift ;;
    --dry-run) DRY=1; shift ;;
    *) echo "usage: $0 [--budget SECONDS] [--no-checks] [--dry-run]" >&2; exit 2 ;;
  esac
done
START=$(date +%s)
cd "$(dirname "$0")/.."
PY=python
QUICK=()
if [ $DRY = 1 ]; then
  scripts/gpu_wheels.sh || exit 1
  PY=$(scripts/gpu_wheels.sh --venv)/bin/python
  QUICK=(--quick)
  OUT=${OUT:-gpu-out/dry}
fi
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
: > "$OUT/summary.txt"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export WANDB_MODE=offline
mapfile -t WHEELS < <(find .whl -type f -name '*.whl' 2>/dev/null | sort)
if [ ${#WHEELS[@]} -gt 0 ]; then
  # Installed once per set of wheels: a second command of the same session finds them installed.
  # A folder named site-packages: dill (datasets' fingerprints) pickles every module whose file lies outside the
  # interpreter's prefix and under no "site-packages" by value, and pickling pyarrow by value fails (MonthDayNano).
  SITE=${TMPDIR:-/tmp}/runner-gpu-$(echo "$PY ${WHEELS[*]}" | sha256sum | cut -c1-12)/site-packages
  if [ ! -f "$SITE/.installed" ]; then
    rm -rf "$SITE"
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "${WHEELS[@]}" && touch "$SITE/.installed"
  fi
  export PYTHONPATH=$SITE:$PYTHONPATH
fi
FAILED=0
part() {  # part NAME COMMAND...: run it, log it, record its exit code and wall time, go on
  local name=$1 start rc
  shift
  start=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  [ $rc = 0 ] || FAILED=1
  echo "$name: exit $rc, $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
  return $rc
}
if [ $CHECKS = 1 ]; then
  [ $DRY = 1 ] || part nvidia-smi nvidia-smi
  part versions "$PY" -c "import torch, lightning; print(torch.__version__, lightning.__version__,
    torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')"
  run_dir=$(mktemp -d "${TMPDIR:-/tmp}/runner-quickstart.XXXXXX")
  if [ $DRY = 1 ]; then
    part quickstart "$PY" -m runner +recipe=smoke "hydra.run.dir=$run_dir/run" &
  else
    part quickstart "$PY" -m runner +recipe=quickstart trainer=gpu cudagraphs=reduce_overhead trainer.max_steps=120 \
      "hydra.run.dir=$run_dir/run" &
  fi
  part pytest-gpu "$PY" -m pytest -m gpu -q -p no:cacheprovider -n "$([ $DRY = 1 ] && echo 2 || echo 4)" \
    --timeout 300 -W ignore::DeprecationWarning &
  wait
  # wait drops the background parts' FAILED: read their exit codes back from the summary
  grep -qv ': exit 0,' "$OUT/summary.txt" && FAILED=1
fi
LEFT=$(( BUDGET - ($(date +%s) - START) - 15 ))  # 15 s for the script's own exit after the last workload
BUDGET_ARGS=(--budget-s "$LEFT")
[ $DRY = 1 ] && BUDGET_ARGS=()  # a dry run runs every workload: the budget is the GPU's
# shellcheck disable=SC2086  # GPU_BENCH_ARGS is a list of arguments
part workloads "$PY" benchmarks/gpu.py "${QUICK[@]}" "${BUDGET_ARGS[@]}" --out-dir "$OUT/rows" ${GPU_BENCH_ARGS:-}
echo "rows in $OUT/rows; fold them in: python benchmarks/gpu.py --merge $OUT/rows/*.json" | tee -a "$OUT/summary.txt"
exit $FAILED
