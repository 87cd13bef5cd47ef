"""``.ci/versions.sh`` installs from the package index whatever pip configuration the machine carries.

A machine image may hold a global pip configuration that caps torch at the releases on its disk
(``constraint = ...``) and adds local wheel folders. CI runs on such an image, and the version check
must still install the newest supported torch. These tests give pip a configuration that caps a small
package below the requested release, as the image caps torch, and resolve the request for real
against the index (``--dry-run``, nothing installed) through the script's own ``from_index``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "versions.sh"
# A small pure-Python package with two releases on the index: the cap allows the older one only.
PACKAGE, CAPPED_BELOW, WANTED = "six", "1.15.0", "1.16.0"


def _capping_config(tmp_path: Path) -> dict[str, str]:
    """An environment whose pip configuration file and PIP_CONSTRAINT both cap PACKAGE below WANTED."""
    caps = tmp_path / "caps.txt"
    caps.write_text(f"{PACKAGE}<={CAPPED_BELOW}\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nconstraint = {caps}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PIP_CONFIG_FILE": str(conf), "PIP_CONSTRAINT": str(caps)}


def _resolve(prefix: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    pip = f"{sys.executable} -m pip install --dry-run --no-deps --ignore-installed {PACKAGE}=={WANTED}"
    return subprocess.run(["bash", "-c", f"source {SCRIPT} --functions && {prefix} {pip}"],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_from_index_sets_a_capping_pip_configuration_aside(tmp_path: Path) -> None:
    env = _capping_config(tmp_path)
    capped = _resolve("", env)
    # The configuration is real and caps: without from_index the request cannot be met.
    assert capped.returncode != 0 and "constraint" in capped.stdout + capped.stderr, capped.stdout + capped.stderr
    lifted = _resolve("from_index", env)
    assert lifted.returncode == 0, lifted.stdout + lifted.stderr
    assert f"Would install {PACKAGE}-{WANTED}" in lifted.stdout


def test_every_pip_install_of_the_script_goes_through_from_index() -> None:
    lines = [line.strip() for line in SCRIPT.read_text().splitlines() if not line.strip().startswith("#")]
    pip_calls = [line for line in lines if re.search(r"\bpip\"? install\b", line)]
    assert len(pip_calls) >= 2, pip_calls  # torch, then runner's pins
    assert all(line.startswith("from_index ") for line in pip_calls), pip_calls


@pytest.mark.slow
def test_the_first_torch_runs_on_a_second_vector_width() -> None:
    """``second_isa`` picks a vector width other than the machine's (AVX-512 -> avx2, AVX2 -> default, nothing
    where there is none), and torch really runs its kernels at that width when the job sets it."""
    probe = f"{sys.executable} -c 'import torch; print(torch.backends.cpu.get_cpu_capability())'"
    script = (f"source {SCRIPT} --functions && for n in AVX512 AVX512_VNNI AVX2 DEFAULT;"
              f" do echo \"$n:$(second_isa $n)\"; done && native=$({probe}) && other=$(second_isa $native)"
              f" && echo \"native:$native\" && ATEN_CPU_CAPABILITY=$other {probe}")
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[:4] == ["AVX512:avx2", "AVX512_VNNI:avx2", "AVX2:default", "DEFAULT:"]
    native, under = lines[4].removeprefix("native:"), lines[5]
    if native.startswith("AVX512"):
        assert under == "AVX2"
    elif native != "DEFAULT":  # AVX2 (this kind of machine's), or another architecture's vector unit
        assert under == "DEFAULT"
