"""``telemetry.trace=true``: torch's structured trace in the run dir, tlparse's HTML report beside it,
linked from report.md; torch's trace logger is left as it was found."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from runner.config import compose, load
from runner.run import run


@pytest.mark.slow
def test_traced_run_leaves_tlparse_report_naming_the_compiled_frame(tmp_path: Path) -> None:
    trace_log = logging.getLogger("torch.__trace")
    before = (trace_log.level, trace_log.propagate)
    run_dir = tmp_path / "run"
    smoke = ["+recipe=smoke", "compile.backend=aot_eager", "trainer.max_steps=4", "trainer.val_check_interval=4",
             "trainer.enable_progress_bar=false"]
    # First an untraced run in this process, as in a tune or a sweep: torch names each source file in the
    # trace once per process, so the traced run must still get the names of files compiled before it.
    run(load(compose(smoke, run_dir=str(tmp_path / "untraced"))))
    result = run(load(compose([*smoke, "telemetry.trace=true"], run_dir=str(run_dir))))
    # Our handler is gone (torch's own handler without a directory removes itself at the first compile
    # of any process: no handler writes anywhere after the run), level and propagation as found.
    assert not [h for h in trace_log.handlers if str(run_dir) in str(getattr(h, "root_dir", ""))]
    assert (trace_log.level, trace_log.propagate) == before
    traces = list((run_dir / "trace").glob("*.log"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0
    index = run_dir / "tlparse" / "index.html"
    assert index.is_file()
    html = index.read_text()
    # The stack trie names the compiled frame, at runner's training_step, with its compile id (frame ids
    # count per process: other tests in this process compiled frames before this one).
    assert re.search(r"\[\d+/\d+\]</a> \S*runner/training/module\.py:\d+ in training_step", html), html[:3000]
    assert result.figures["trace/html"] == "tlparse/index.html"
    assert "[tlparse/index.html](tlparse/index.html)" in (run_dir / "report.md").read_text()
    assert json.loads((run_dir / "report.json").read_text())["trace/status"] == "rendered"
