"""Hub names end to end, against the loopback Hub (tests/hub_server.py) with the real clients: a run by model and
data set names trains and records both commits, the same command offline trains from the cache, every refusal is
one paragraph before anything is built, ranks download once, and an interrupted download is never taken whole."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hf_models import TEXT, save_model
from tests.hub_server import LoopbackHub

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_test"
STEPS = ["trainer.max_steps=2", "trainer.val_check_interval=2", "compile.backend=eager", "data.seq_len=32",
         "after.sample_tokens=0", "compile.background=disabled"]
README = """---
configs:
- config_name: small
  data_files:
  - split: train
    path: small/train-*.parquet
  - split: validation
    path: small/validation.parquet
- config_name: big
  data_files: big/*.jsonl
---
# a data set of text rows
"""

pytestmark = pytest.mark.slow


def _parquet(rows: list[str]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"text": rows}), out)
    return out.getvalue()


def _adapter(base: Path, out: Path) -> Path:
    """A LoRA adapter peft saves for the tiny Llama, on every linear layer runner's peft=lora adapts."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=16, lora_alpha=32,
                                                                                  target_modules=targets))
    with torch.no_grad():  # not the zero-initialised B: loading it must show
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackHub]:
    root = tmp_path_factory.mktemp("hub")
    server = LoopbackHub(root / "server", token=TOKEN)
    server.start()
    server.add_folder("org/tiny", save_model(root / "tiny"))
    rows = [t * 3 for t in TEXT] * 10
    server.add_commit("dsorg/data", {
        "README.md": README, "small/train-00000.parquet": _parquet(rows[:300]),
        "small/train-00001.parquet": _parquet(rows[300:600]), "small/validation.parquet": _parquet(rows[600:700]),
        "big/rows.jsonl": "\n".join(json.dumps({"text": r}) for r in rows)}, repo_type="dataset")
    server.add_folder("org/gated", root / "tiny")
    server.set_gated("org/gated")
    server.add_folder("org/adapter", _adapter(root / "tiny", root / "adapter"))
    server.add_commit("org/only-data", {"notes.md": "no model here"})
    yield server
    server.stop()


def _env(hub: LoopbackHub, home: Path, offline: bool = False, **more: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "LOCAL_RANK", "RUNNER_HUB"))}
    return {**base, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1" if offline else "0",
            "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", **more}


def _runner(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _run_dir(cwd: Path) -> Path:
    (found,) = [p.parent for p in cwd.glob("outputs/*/*/report.json")]
    return found


def _hub_records(run_dir: Path) -> dict[str, dict]:
    return {r["key"]: r for r in json.loads((run_dir / "report.json").read_text())["run/hub"]}


def _downloads(hub: LoopbackHub, name: str) -> list[str]:
    return [p for m, p in hub.requests if m == "GET" and "/resolve/" in p and name in p]


NAMES = ["+recipe=llama_lora", "model.path=org/tiny", "data.path=hf://datasets/dsorg/data", "data.config=small"]


def test_a_run_by_hub_names_trains_records_commits_and_trains_offline_after(hub: LoopbackHub,
                                                                             tmp_path: Path) -> None:
    home = tmp_path / "hf"
    hub.clear_requests()
    first = _runner([*NAMES, *STEPS], tmp_path / "a", _env(hub, home))
    assert first.returncode == 0, first.stderr[-3000:]
    run = _run_dir(tmp_path / "a")
    records = _hub_records(run)
    model_commit = hub.repo("org/tiny").branches["main"]
    data_commit = hub.repo("dsorg/data", "dataset").branches["main"]
    assert (records["model.path"]["commit"], records["model.path"]["revision"]) == (model_commit, "main")
    assert (records["data.path"]["commit"], records["data.path"]["split"]) == (data_commit, "train")
    assert records["data.val_path"]["split"] == "validation"  # the data set's own validation split, not a share
    # the run's command line names the commits: resume, eval and export read those
    saved = (run / ".hydra" / "overrides.yaml").read_text()
    assert f"model.path=org/tiny@{model_commit}" in saved and f"dsorg/data@{data_commit}" in saved
    # downloaded into the user's cache, each file once; the big config's files never
    assert (home / "hub" / "models--org--tiny" / "snapshots" / model_commit / "model.safetensors").is_file()
    assert len(_downloads(hub, "model.safetensors")) == 1
    assert not _downloads(hub, "big/rows.jsonl")
    assert "hub: downloading org/tiny" in first.stderr

    # main moves on the Hub; offline, with the Hub gone, the same command trains from the cache's commit
    hub.add_commit("org/tiny", {"README.md": "a newer main"})
    hub.stop()
    try:
        again = _runner([*NAMES, *STEPS], tmp_path / "b", _env(hub, home, offline=True))
        assert again.returncode == 0, again.stderr[-3000:]
        assert _hub_records(_run_dir(tmp_path / "b"))["model.path"]["commit"] == model_commit
        evaluated = _runner(["eval", str(run)], tmp_path / "a", _env(hub, home, offline=True))
        assert evaluated.returncode == 0, evaluated.stderr[-3000:]
        assert json.loads((run / "eval.json").read_text())
        # HF_HUB_OFFLINE unset and no Hub to reach: the cache's commit, said
        # HF_HUB_OFFLINE unset and no Hub to reach: the check before a run takes the cache's commit, and says so
        check = f"from runner.config.composing.precheck import precheck; print(precheck({[*NAMES, *STEPS]!r}))"
        unreachable = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=_env(hub, home),
                                     capture_output=True, text=True, timeout=300)
        assert unreachable.returncode == 0, unreachable.stderr[-3000:]
        assert "cannot be reached" in unreachable.stderr and model_commit in unreachable.stdout
    finally:
        hub.start()


DATA = ["data.path=hf://datasets/dsorg/data", "data.config=small"]
REFUSALS = [
    (["model.path=org/tniy", *DATA], ["no model org/tniy on the Hub", "This machine's cache holds org/tiny"]),
    (["model.path=org/gated", *DATA], ["org/gated is gated", "/org/gated", "HF_TOKEN"]),
    (["model.path=org/tiny@v9", *DATA], ["has no revision v9", "drop @v9"]),
    (["model.path=org/tiny", DATA[0], "data.config=smal"], ["data.config=smal is not a config",
                                                             "Did you mean data.config=small", "big"]),
    (["model.path=org/tiny", *DATA, "data.split=tran"], ["has no split tran", "Did you mean data.split=train",
                                                         "validation"]),
    (["model.path=org/tiny", DATA[0]], ["has 2 configs", "data.config=small"]),
    (["model.path=org/only-data"], ["holds no model", "notes.md"]),
    (["peft.path=org/tiny"], ["holds no adapter", "model.path=org/tiny"]),
    (["data.path=hf://datasets/dsorg/absent"], ["no data set dsorg/absent on the Hub"]),
    (["data.split=train"], ["data.split=train chooses within a Hugging Face Hub data set", "~data.split"]),
]
DRIVER = """
import contextlib, io, json, os, sys
import runner.__main__ as entry
from runner import hub
hub.fetch(hub.wanted("model.path", "org/tiny", "model"))  # the cache holds org/tiny: the closest name to a typo
out = []
for i, case in enumerate(json.loads(sys.argv[1])):
    os.makedirs(str(i)); os.chdir(str(i))
    err, sys.argv = io.StringIO(), ["runner", *case]
    with contextlib.redirect_stderr(err):
        try:
            entry.main(); code = 0
        except SystemExit as e:
            code = e.code
    out.append({"code": code, "stderr": err.getvalue(), "outputs": os.path.exists("outputs")})
    os.chdir("..")
print(json.dumps(out))
"""


def _refused(got: dict, fragments: list[str], what: object) -> None:
    message = got["stderr"].strip().splitlines()[-1]  # after a download's progress lines, if one began
    assert got["code"] == 2, (what, got["stderr"])
    assert message.startswith("runner: ") and "Traceback" not in got["stderr"], got["stderr"]
    assert not got["outputs"], what
    for fragment in fragments:
        assert fragment in message, (what, message)


def test_each_refusal_is_one_paragraph_before_anything_is_built(hub: LoopbackHub, tmp_path: Path) -> None:
    """Each case as a user meets it, through ``runner``'s own entry point: rc 2, one paragraph, no traceback, no run
    directory; the gated repo's weights are never asked for. One process runs the cases (each in its own
    directory); offline, an uncached name in its own."""
    home = tmp_path / "hf"
    cases = [["+recipe=llama_lora", *extra, *STEPS] for extra, _ in REFUSALS]
    hub.clear_requests()
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], cwd=tmp_path, env=_env(hub, home),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for (extra, fragments), got in zip(REFUSALS, json.loads(proc.stdout.splitlines()[-1]), strict=True):
        _refused(got, fragments, extra)
    assert not [p for m, p in hub.requests if "/org/gated/resolve/" in p and "safetensors" in p]
    offline = _runner(["+recipe=llama_lora", "model.path=org/absent", *STEPS], tmp_path / "offline",
                      _env(hub, home, offline=True))
    _refused({"code": offline.returncode, "stderr": offline.stderr, "outputs": (tmp_path / "offline" / "outputs")
              .exists()}, ["HF_HUB_OFFLINE=1 is set", "`hf download org/absent --revision main`"], "offline")


def test_a_gated_base_with_a_token_an_adapter_and_data_by_bare_name(hub: LoopbackHub, tmp_path: Path) -> None:
    """A gated repo trains with HF_TOKEN; peft.path names an adapter on the Hub, loaded into the run's adapter; a bare
    ORG/NAME in data.path is a data set when no such path exists, and a config without a validation split
    validates on a seeded share of its rows."""
    proc = _runner(["+recipe=llama_lora", "model.path=org/gated", "peft.path=org/adapter", "data.path=dsorg/data",
                    "data.config=big", *STEPS], tmp_path, _env(hub, tmp_path / "hf", HF_TOKEN=TOKEN))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _hub_records(_run_dir(tmp_path))
    assert records["model.path"]["name"] == "org/gated" and records["peft.path"]["name"] == "org/adapter"
    assert records["data.path"]["config"] == "big" and "data.val_path" not in records


def test_an_interrupted_download_is_an_error_and_never_a_snapshot_taken_whole(hub: LoopbackHub,
                                                                              tmp_path: Path) -> None:
    """The weights' connection drops each time: the run stops before anything is built, naming what to rerun. A
    download killed midway leaves a partial snapshot the next run does not take (offline: refused); once the Hub
    serves it whole, the same command trains."""
    home = tmp_path / "hf"
    hub.add_folder("org/flaky", save_model(tmp_path / "flaky"))
    args = ["+recipe=llama_lora", "model.path=org/flaky", *STEPS]
    hub.fault("org/flaky", "model.safetensors", truncate_at=0)
    try:
        cut = _runner(args, tmp_path / "a", _env(hub, home))
    finally:
        hub.clear_faults()
    assert cut.returncode == 2, cut.stderr[-3000:]
    last = cut.stderr.strip().splitlines()[-1]
    assert last.startswith("runner: model.path=org/flaky") and "Run again" in last, cut.stderr[-3000:]
    assert not (tmp_path / "a" / "outputs").exists()

    slow = hub.fault("org/flaky", "model.safetensors", bytes_per_s=20_000)
    killed = subprocess.Popen([sys.executable, "-m", "runner", *args], cwd=tmp_path, env=_env(hub, home),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert slow.started.wait(120)
    time.sleep(0.5)
    killed.kill()
    killed.wait(30)
    hub.clear_faults()
    offline = _runner(args, tmp_path / "b", _env(hub, home, offline=True))
    assert offline.returncode == 2 and "does not hold org/flaky" in offline.stderr, offline.stderr[-2000:]
    whole = _runner(args, tmp_path / "c", _env(hub, home))
    assert whole.returncode == 0, whole.stderr[-3000:]


def test_ranks_of_one_machine_download_once(hub: LoopbackHub, tmp_path: Path) -> None:
    """Local rank 1 starts first and waits; local rank 0 downloads (slowly); both end with the same whole snapshot
    and the Hub served each file once."""
    hub.add_folder("org/shared", save_model(tmp_path / "shared"))
    hub.clear_requests()
    fault = hub.fault("org/shared", "model.safetensors", bytes_per_s=200_000)
    code = ("import json, sys; from runner import hub; p = hub.fetch(hub.wanted('model.path', 'org/shared', 'model'));"
            " print(json.dumps([p.commit, p.local]))")
    home = tmp_path / "hf"
    waiter = subprocess.Popen([sys.executable, "-c", code], env=_env(hub, home, LOCAL_RANK="1"), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    loader = subprocess.run([sys.executable, "-c", code], env=_env(hub, home, LOCAL_RANK="0"), cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    out, err = waiter.communicate(timeout=300)
    hub.clear_faults()
    assert loader.returncode == 0 and waiter.returncode == 0, (loader.stderr[-2000:], err[-2000:])
    assert json.loads(out.splitlines()[-1]) == json.loads(loader.stdout.splitlines()[-1])
    assert fault.served == 1
    assert len(_downloads(hub, "org/shared/resolve")) == len(set(_downloads(hub, "org/shared/resolve")))


def test_two_ddp_ranks_on_one_cache_download_once(hub: LoopbackHub, tmp_path: Path) -> None:
    hub.add_folder("org/ddp", save_model(tmp_path / "ddp"))
    hub.clear_requests()
    proc = _runner(["+recipe=llama_lora", "model.path=org/ddp", "trainer.devices=2", *STEPS], tmp_path / "run",
                   _env(hub, tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    weights = _downloads(hub, "org/ddp/resolve")
    assert len(weights) == len(set(weights)) and any("model.safetensors" in w for w in weights)
    # one revision lookup, at the launch: the job and the second rank read the commit the command line pins
    assert sum(1 for m, p in hub.requests if p.split("?")[0] == "/api/models/org/ddp") == 1


def test_a_resume_reads_its_commit_and_says_the_branch_moved(hub: LoopbackHub, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    hub.add_folder("org/moving", save_model(tmp_path / "moving"))
    first_commit = hub.repo("org/moving").branches["main"]
    args = ["+recipe=llama_lora", "model.path=org/moving", *STEPS]
    assert _runner(args, tmp_path / "a", _env(hub, home)).returncode == 0
    run = _run_dir(tmp_path / "a")
    hub.add_commit("org/moving", {"tokenizer_config.json": b"{}"})
    fetch = "from runner import hub; hub.fetch(hub.wanted('model.path', 'org/moving', 'model'))"
    moved = subprocess.run([sys.executable, "-c", fetch], env=_env(hub, home), capture_output=True, text=True)
    assert moved.returncode == 0, moved.stderr[-2000:]  # another run fetched main: the cache's main moved
    resumed = _runner(["resume", str(run), "trainer.max_steps=4"], tmp_path / "a", _env(hub, home, offline=True))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "is now at" in resumed.stderr and f"this run reads {first_commit[:12]}" in resumed.stderr
    record = _hub_records(run)["model.path"]
    assert (record["commit"], record["revision"]) == (first_commit, "main")
