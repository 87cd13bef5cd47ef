"""``tests/cxx/g++``, the compiler Inductor calls in a test run: an identical build is copied, not compiled again.

A tiny C++ source is built twice into two directories (as two Inductor cache directories would), then once more
with other flags and once with another source: the second build is a copy of the first's bytes and loads; a
change of flags or of the source is a new build."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

WRAPPER = Path(__file__).resolve().parent / "cxx" / "g++"
SOURCE = 'extern "C" int answer() { return %d; }\n'


def _build(tmp: Path, where: str, flags: list[str], value: int = 42) -> Path:
    out_dir = tmp / where
    out_dir.mkdir(exist_ok=True)
    source = out_dir / "kernel.cpp"
    source.write_text(SOURCE % value)
    out = out_dir / "kernel.so"
    env = {**os.environ, "RUNNER_TEST_CXX": "g++", "RUNNER_TEST_CXX_CACHE": str(tmp / "kept")}
    subprocess.run([str(WRAPPER), str(source), *flags, "-shared", "-fPIC", "-o", str(out)], env=env, check=True,
                   timeout=120)
    return out


@pytest.mark.slow
def test_an_identical_build_is_copied_and_loads(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    first = _build(tmp_path, "a", ["-O1"])
    again = _build(tmp_path, "b", ["-O1"])
    assert (tmp_path / "kept" / "calls").read_text() == "br"  # built, then reused
    assert again.read_bytes() == first.read_bytes()
    assert ctypes.CDLL(str(again)).answer() == 42
    _build(tmp_path, "c", ["-O2"])  # other flags
    other = _build(tmp_path, "d", ["-O1"], value=7)  # another source
    assert (tmp_path / "kept" / "calls").read_text() == "brbb"
    assert ctypes.CDLL(str(other)).answer() == 7


@pytest.mark.slow
def test_inductor_in_a_test_run_compiles_through_it() -> None:
    import torch._inductor.config as inductor_config

    if "RUNNER_TEST_CXX" not in os.environ:
        pytest.skip("CXX names no g++ here (tests/conftest.py puts the wrapper only in front of a g++)")
    assert os.environ["CXX"] == str(WRAPPER) and inductor_config.cpp.cxx[1] == str(WRAPPER)
