#!/usr/bin/env bash
# runner on the oldest and the newest torch it supports (pyproject.toml: torch>=2.11,<2.16).
#
# Each torch comes from PyPI (the CUDA builds; they run on the CPU) into a venv of its own, then runner
# and its other pins (constraints.txt without its torch line) go in beside it: that install must leave
# torch as it found it. On each: the torch-internals pins, real Inductor fits through the strategy and
# an idiom, and the smoke recipe from the command line. Every job prints its wall time.
#
# The venvs live in .venvs/ inside the checkout: a local checkout reuses them (torch is installed once
# per version, runner's pins again only when pyproject.toml or constraints.txt change); CI's fresh clone
# starts clean. The installs (network-bound downloads) run side by side, the versions one after the other,
# each version's tests on two pytest workers, test by test (mostly Inductor compiling, CPU-bound; the timm
# tests, a third of the whole, run on the newest torch only). Started during `make test` instead, the downloads
# slowed it by as much as they saved (measured in CI, 2026-11-26). The first torch's tests run on a second vector width
# (ATEN_CPU_CAPABILITY: avx2 on an AVX-512 machine, default on an AVX2 one; second_isa below), so a test whose
# tolerance holds on one width only fails on every CI machine (docs/testing.md).
#
# These installs come from the package index with the machine's pip configuration set aside (from_index):
# a machine image may carry a global pip config that caps torch at the releases on its own disk and adds
# local wheel folders (seen: `constraint` capping torch<=2.14.1). That is the machine's, not runner's, and
# it must neither refuse a supported torch nor swap in a local build. `make setup` keeps the config.
# Usage: .ci/versions.sh [TORCH_VERSION...]   (default: the oldest and the newest supported)
#        .ci/versions.sh --install VERSION     (that venv only: `make setup-vision`, timm's models)
#        source .ci/versions.sh --functions   (defines the functions only; the tests call from_index)
set -euo pipefail

# from_index CMD...: CMD with pip reading no configuration file (PIP_CONFIG_FILE=/dev/null; pip's
# --isolated and an empty PIP_CONSTRAINT do not lift a config file's constraint) and without the
# environment's constraint, find-links and extra indexes. PIP_INDEX_URL (a mirror) and PIP_CERT stay.
from_index() {
  env -u PIP_CONSTRAINT -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null "$@"
}

# second_isa NATIVE: the ATen CPU capability the first torch's tests run under, given the machine's own (torch's
# `get_cpu_capability()`): a vector width other than the native one, so that a test that holds on one width only
# fails in CI on every machine, not only on the machine that has the other (docs/testing.md: tolerances). AVX-512
# machines run AVX2 (every x86 machine here has it); AVX2 machines run ATen's unvectorised `default`. Inductor's
# CPU code follows the variable too (its vector width). Empty where there is no other width to take.
second_isa() {
  case "$1" in
    AVX512*) echo avx2 ;;
    DEFAULT | "") echo "" ;;
    *) echo default ;;
  esac
}
[ "${1:-}" = --functions ] && return 0

cd "$(dirname "$0")/.."
export WANDB_MODE=offline
# torch and runner's pins go in without byte-code (--no-compile below: pip would compile every module, transformers'
# thousands), so the first process to import a module writes its byte-code for the others; with
# PYTHONDONTWRITEBYTECODE set (this machine image sets it) each process would compile torch from source (~12 s).
unset PYTHONDONTWRITEBYTECODE
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(2.11.0 2.15.0)
VENVS=${RUNNER_VERSION_VENVS:-.venvs}
# A few real Inductor cases (the rest of these files runs on the pinned torch in `make test`), on every torch: the
# default scope and per-block compiles through the strategy with the fused optimizer, and a LightningModule with
# torchmetrics through CompileStrategy() as users write it, each compared with eager Lightning; torch's own
# CUDA-graph partition decision over runner's compiled step (the check runner corrects before 2.15), and the static
# batch buffers; transformers' models and their checks in this process; the chunked loss (torch's
# linear_cross_entropy came in 2.13 and changed its options by 2.15; on 2.11 only the fallback and the refusal run).
# The graph-safe optimizer step and cudagraphs=auto's decision (seconds, eager): they lean on torch's fused kernels'
# found_inf and the ops' tags, which move between releases.
SUBSET=(
  tests/test_torch_internals.py
  tests/test_graphed_optimizer.py
  tests/test_graphed_optimizer_capture.py
  tests/test_cudagraphs_auto.py
  tests/test_cudagraph_partitions.py
  tests/test_static_batch.py
  "tests/test_strategy.py::test_inductor_scopes_with_fused_optimizer_match_eager[Scope.step]"
  "tests/test_strategy.py::test_inductor_scopes_with_fused_optimizer_match_eager[Scope.blocks]"
  "tests/test_idioms.py::test_idiom_through_default_compile_strategy_with_inductor[metrics_template]"
  tests/test_hf_models.py
  tests/test_chunked_loss.py
)
# On the newest torch only, the one `make run-vision` trains with: timm's CNN and ViT through every scope (PyPI's
# torchvision pairs with PyPI's torch, so timm imports here, as it cannot beside make setup's local CPU torch), a
# trained timm model's export, and a Llama-style LM and BERT under Inductor (make test runs both on the pinned torch).
# They check other libraries' models, not torch's internals; run on both torches they cost CI about 3 minutes
# (2026-11-28: the first torch's tests went from 314 s to 118 s without them, the skip below and docs/testing.md's
# Hub-name wait).
NEWEST=(
  tests/test_vision.py
  tests/test_after.py::test_timm_export_loads_with_create_model_and_load_state_dict
  "tests/test_hf_stack.py::test_inductor_matches_eager[llama]"
  "tests/test_hf_stack.py::test_inductor_matches_eager[bert]"
)
# A process refusing a bad model is the same on every torch (make test runs it).
SKIP=(--deselect tests/test_hf_models.py::test_a_bad_model_writes_nothing_and_exits_2)

clock() { date +%s; }
took() { echo "$(( $(clock) - $1 )) s"; }
torch_of() { "$1/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true; }

install() {  # install VERSION VENV: torch==VERSION, then runner[dev,vision] with the other pins, torch untouched
  local version=$1 venv=$2 stamp now
  stamp=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
  if [ "$(torch_of "$venv")" != "$version" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    from_index "$venv/bin/pip" install --quiet --no-compile "torch==$version"
  fi
  if [ "$(cat "$venv/.runner-stamp" 2>/dev/null)" != "$stamp" ]; then
    # torch pinned to this venv's own: timm's torchvision then resolves to the release made for it (0.26.0 for
    # 2.11, 0.29.x for 2.15) instead of pulling in the torch of the newest torchvision.
    { grep -v '^torch==' constraints.txt; echo "torch==$version"; } > "$venv/constraints-this-torch.txt"
    from_index "$venv/bin/pip" install --quiet --no-compile -c "$venv/constraints-this-torch.txt" -e '.[dev,vision]'
    echo "$stamp" > "$venv/.runner-stamp"
  fi
  now=$(torch_of "$venv")
  if [ "$now" != "$version" ]; then
    echo "installing runner replaced torch $version with '$now': pyproject.toml's torch range excludes $version" >&2
    return 1
  fi
}

if [ "${VERSIONS[0]}" = --install ]; then  # --install VERSION: that torch's venv only (make setup-vision)
  install "${VERSIONS[1]:?--install needs a torch version}" "$VENVS/torch-${VERSIONS[1]}"
  echo "$VENVS/torch-${VERSIONS[1]}: torch ${VERSIONS[1]} with runner[dev,vision]"
  exit 0
fi

total=$(clock)
mkdir -p "$VENVS"
pids=()
for version in "${VERSIONS[@]}"; do
  ( t=$(clock); install "$version" "$VENVS/torch-$version"; echo "torch $version: install $(took "$t")" ) \
    > "$VENVS/install-$version.log" 2>&1 &
  pids+=($!)
done
for i in "${!VERSIONS[@]}"; do
  if ! wait "${pids[$i]}"; then
    tail -30 "$VENVS/install-${VERSIONS[$i]}.log"; echo "torch ${VERSIONS[$i]}: install failed" >&2; exit 1
  fi
  grep -v '^WARNING: Location' "$VENVS/install-${VERSIONS[$i]}.log" || true
done
echo "installs: $(took "$total")"

for i in "${!VERSIONS[@]}"; do
  version=${VERSIONS[$i]}
  venv=$VENVS/torch-$version
  isa=()  # the first torch's tests on a second vector width (second_isa); the others on the machine's own
  if [ "$i" = 0 ]; then
    native=$("$venv/bin/python" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')
    other=$(second_isa "$native")
    [ -z "$other" ] || isa=("ATEN_CPU_CAPABILITY=$other")
    echo "torch $version: tests under ATEN_CPU_CAPABILITY=${other:-(native)}, the machine's own being $native"
  fi
  tests=("${SUBSET[@]}")
  [ "$version" != "${VERSIONS[-1]}" ] || tests+=("${NEWEST[@]}")
  t=$(clock)
  env "${isa[@]}" "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-2}" --dist load \
    --durations=10 "${SKIP[@]}" "${tests[@]}"
  echo "torch $version: tests $(took "$t")"
  t=$(clock); out=$(mktemp -d)
  if ! "$venv/bin/python" -m runner +recipe=smoke "hydra.run.dir=$out/run" > "$out/console.log" 2>&1; then
    tail -40 "$out/console.log"; echo "torch $version: smoke run failed" >&2; exit 1
  fi
  test -s "$out/run/report.md" || { echo "torch $version: the smoke run wrote no report.md" >&2; exit 1; }
  rm -rf "$out"
  echo "torch $version: smoke run $(took "$t")"
done
echo "torch ${VERSIONS[*]}: $(took "$total") in all"
