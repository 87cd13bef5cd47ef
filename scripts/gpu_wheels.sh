#!/usr/bin/env bash
# .whl/: the wheels a GPU machine lacks, for runner's CLI, its tests and benchmarks/gpu.py there (docs/gpu.md).
#
# The GPU machines have Python 3.12, PyPI's torch 2.11.0 (CUDA 13), Lightning 2.6.6, pytest, pytest-xdist and
# pytest-timeout (with what those require), and no network. This script builds a venv of exactly that here (the
# GPU-like venv, kept in RUNNER_GPU_VENV, default ~/.cache/runner/gpu-venv-py3.12, rebuilt only when its spec
# changes; `scripts/gpu_session.sh --dry-run` runs in it), asks pip what NEEDS adds on top of what the venv holds
# (`pip install --dry-run --report`, pinned by constraints.txt where it pins a package the venv lacks), and
# downloads exactly those as cp312 manylinux x86_64 wheels (an sdist-only package, antlr4's, is built here: pure
# Python). The wheels are split into parts of at most PART_MIB (default 56) MiB, .whl/1, .whl/2, ..., for a copy
# to the GPU machine that is limited in size per transfer; scripts/gpu_session.sh installs every part it finds.
# .whl/ is rebuilt only when NEEDS, constraints.txt or the venv's spec change (.whl/stamp).
#
# Usage: scripts/gpu_wheels.sh           # the venv and .whl/, built or reused
#        scripts/gpu_wheels.sh --venv    # the venv only; prints its path
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../.ci/versions.sh
source .ci/versions.sh --functions  # from_index: pip without this machine's own config (caps, local wheels)

TORCH=2.11.0
LIGHTNING=2.6.6
BASE=("torch==$TORCH" "lightning==$LIGHTNING" pytest pytest-xdist pytest-timeout)
# runner's CLI (Hydra, rich, matplotlib), its Hugging Face models and data (transformers, datasets: pyarrow, pandas),
# LoRA's peers and QLoRA's NF4 (peft, torchao: the lora workload), and DPO's peer (trl: the dpo workload).
# wandb and tensorboard are left out: runner imports them only for logger=wandb|tensorboard, which a GPU check
# does not use (they would add 40 MB to every copy).
NEEDS=(hydra-core omegaconf rich matplotlib transformers tokenizers safetensors huggingface_hub datasets pyarrow pandas
       peft torchao trl)
# Required by those but never imported offline: hf-xet only downloads from the Hub (the GPU machine has no network);
# leaving it out keeps two parts under the 64 MiB a copy to the GPU machine may carry.
SKIP=(hf-xet)
VENV=${RUNNER_GPU_VENV:-$HOME/.cache/runner/gpu-venv-py3.12}
PART_MIB=${PART_MIB:-56}

python312() {  # a Python 3.12 interpreter: RUNNER_GPU_PYTHON, python3.12 on PATH, or pyenv's
  local candidate
  for candidate in "${RUNNER_GPU_PYTHON:-}" python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "no Python 3.12 here (the GPU machines run 3.12): set RUNNER_GPU_PYTHON=/path/to/python3.12, or install" \
    "one (pyenv install 3.12)" >&2
  return 1
}

ensure_venv() {  # the GPU-like venv, built when missing or made from another spec
  local py spec
  py=$(python312)
  spec="$("$py" --version) ${BASE[*]}"
  if [ "$(cat "$VENV/.spec" 2>/dev/null)" != "$spec" ]; then
    echo "building the GPU-like venv in $VENV ($spec; about 4.6 GB, 2 min)" >&2
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
    from_index "$VENV/bin/pip" install --quiet --no-compile "${BASE[@]}" >&2
    echo "$spec" > "$VENV/.spec"
  fi
}

ensure_venv
if [ "${1:-}" = --venv ]; then
  echo "$VENV"
  exit 0
fi

stamp=$( { cat "$VENV/.spec" constraints.txt; echo "${NEEDS[*]} ${SKIP[*]} $PART_MIB"; } | sha256sum | cut -c1-16)
if [ "$(cat .whl/stamp 2>/dev/null)" = "$stamp" ]; then
  echo ".whl/ is up to date ($(du -sh .whl | cut -f1))"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Pins for what the venv lacks only: what it holds stays as it is (the GPU machine's own versions).
"$VENV/bin/python" -m pip list --format=freeze | cut -d= -f1 | tr 'A-Z_.' 'a-z--' > "$work/held"
grep -v '^#' constraints.txt | while IFS= read -r line; do
  name=$(echo "${line%%==*}" | tr 'A-Z_.' 'a-z--')
  grep -qx "$name" "$work/held" || echo "$line"
done > "$work/constraints.txt"
from_index "$VENV/bin/pip" install --quiet --dry-run --report "$work/report.json" -c "$work/constraints.txt" \
  "${NEEDS[@]}"
"$VENV/bin/python" - "$work/report.json" "${SKIP[*]}" > "$work/wanted" <<'EOF'
import json, sys
skip = set(sys.argv[2].split())
for item in json.load(open(sys.argv[1]))["install"]:
    if item["metadata"]["name"].lower().replace("_", "-") in skip:
        continue
    kind = "wheel" if item["download_info"]["url"].endswith(".whl") else "sdist"
    print(kind, f"{item['metadata']['name']}=={item['metadata']['version']}")
EOF
mkdir -p "$work/wheels"
mapfile -t wheels < <(awk '$1 == "wheel" {print $2}' "$work/wanted")
mapfile -t sdists < <(awk '$1 == "sdist" {print $2}' "$work/wanted")
if [ ${#wheels[@]} -gt 0 ]; then
  from_index "$VENV/bin/pip" download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d "$work/wheels" "${wheels[@]}"
fi
if [ ${#sdists[@]} -gt 0 ]; then
  from_index "$VENV/bin/pip" wheel --quiet --no-deps -w "$work/wheels" "${sdists[@]}"
fi
rm -rf .whl
# Parts of at most PART_MIB: the largest wheels first, each into the first part it fits.
"$VENV/bin/python" - "$work/wheels" .whl "$PART_MIB" <<'EOF'
import shutil, sys
from pathlib import Path
src, dst, cap = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) * 2**20
parts: list[int] = []
for wheel in sorted(src.glob("*.whl"), key=lambda p: -p.stat().st_size):
    size = wheel.stat().st_size
    i = next((i for i, used in enumerate(parts) if used + size <= cap), len(parts))
    if i == len(parts):
        parts.append(0)
    parts[i] += size
    (dst / str(i + 1)).mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, dst / str(i + 1) / wheel.name)
for i, used in enumerate(parts, 1):
    print(f".whl/{i}: {len(list((dst / str(i)).glob('*.whl')))} wheels, {used / 2**20:.1f} MiB")
EOF
echo "$stamp" > .whl/stamp
echo ".whl/: $(find .whl -type f -name '*.whl' | wc -l) wheels, $(du -sh .whl | cut -f1); copy each part to the GPU machine"
