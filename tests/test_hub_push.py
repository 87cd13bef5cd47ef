"""Pushing a run's export to the Hugging Face Hub (issue 81): ``runner export RUN --push-to-hub ORG/NAME [--private]``
and ``after.push_to_hub`` at the end of a run, against ``tests/hub_server.py``'s loopback Hub, with the real
huggingface_hub, transformers and peft in processes of their own (``HF_ENDPOINT`` at the loopback Hub, ``HF_HOME`` a
folder of the test's).

One LoRA run trains on a base model and a data set the run reads from the Hub by name (``model.path=org/tiny``,
``data.path=hf://datasets/org/text``) and pushes its export at its end (``after.push_to_hub=org/x``); then ``runner
export`` pushes its adapter and its merged model, and a fresh process loads both back by name: the adapter over its
base (``PeftModel.from_pretrained``, and ``AutoPeftModelForCausalLM`` from the base's name and commit that the pushed
``adapter_config.json`` holds) with logits other than the base's, the merged model with the adapter's. Each refusal
is exit code 2 and one paragraph, with nothing sent to the Hub; the Hub's own refusals (401, 403, 404) are a
paragraph each, and at the end of a run a failed push leaves the run whole and says how to push again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.config import ConfigError, compose, load
from runner.config.checks.push import repo_id_error
from tests.hub_server import USER, HubError, LoopbackHub, Repo

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_push_test"
OWN = ("org", USER)
"""The namespaces the token may write to (the Hub's user and an organisation of theirs)."""
TRAIN = ["model=hf_causal_lm", "model.path=org/tiny", "data=tokenized_text", "data.path=hf://datasets/org/text",
         "data.seq_len=32", "data.batch_size=4", "peft=lora", "peft.r=4", "peft.alpha=8", "compile=eager",
         "optimizer.lr=3e-2", "trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.limit_val_batches=1",
         "trainer.enable_progress_bar=false", "telemetry.speedup_steps=0", "compile.background=disabled",
         "after.sample_tokens=0"]
"""A rank-4 LoRA run of a tiny Llama read from the Hub, on a data set read from the Hub: 3 steps, eager."""


class OwnedHub(LoopbackHub):
    """The loopback Hub with owners, as the Hub answers a token: it writes to its own namespaces (:data:`OWN`) only.
    Creating a repo elsewhere is 403; writing to another account's public repo is 403, and its private repos are
    404 (not found) to it, read or write."""

    def create_repo(self, repo_id: str, repo_type: str = "model", *, private: bool = False,
                    gated: bool | str = False, initial_commit: bool = False) -> Repo:
        if initial_commit and repo_id.split("/")[0] not in OWN:  # POST /api/repos/create: the client's, not ours
            raise HubError(403, f'You don\'t have the rights to create a model under the namespace '
                           f'"{repo_id.split("/")[0]}"')
        return super().create_repo(repo_id, repo_type, private=private, gated=gated, initial_commit=initial_commit)

    def _authorized(self, repo: Repo | None, token: str | None, *, write: bool = False) -> Repo:
        found = super()._authorized(repo, token, write=write)
        if found.repo_id.split("/")[0] not in OWN and (write or found.private):
            if found.private:
                raise HubError(404, "Repository Not Found", "RepoNotFound")
            raise HubError(403, f"You don't have write access to {found.repo_id}")
        return found


@dataclass
class Pushed:
    hub: OwnedHub
    env: dict[str, str]
    run: Path
    base_commit: str
    data_commit: str
    merged_out: Path
    exports: dict[str, subprocess.CompletedProcess[str]]


def _env(hub: LoopbackHub, hf_home: Path, **extra: str) -> dict[str, str]:
    """This environment without its Hugging Face settings, with the loopback Hub's, a cache of the test's own and
    its token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(hf_home), HF_TOKEN=TOKEN, HF_HUB_DISABLE_PROGRESS_BARS="1",
               **extra)
    return env


def _runner(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _client(env: dict[str, str], code: str, timeout: float = 240) -> dict[str, Any]:
    """Run ``code`` (filling the dict ``out``) in a fresh Python with ``env``; ``out``."""
    script = "import json\nout = {}\n" + textwrap.dedent(code) + "\nprint('OUT ' + json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("OUT ")]
    assert proc.returncode == 0 and lines, f"{proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][4:])


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    """The Hub with org/tiny (a saved tiny Llama and its tokenizer) and org/text (JSON lines of text); a LoRA run on
    both that pushes to org/x at its end; its adapter pushed to org/tuned and its merged model to org/tuned-merged
    (private, and kept in --out)."""
    from tests.hf_models import TEXT, save_model

    root = tmp_path_factory.mktemp("push")
    base = save_model(root / "base")
    with OwnedHub(root / "hub", token=TOKEN) as hub:
        base_commit = hub.add_folder("org/tiny", base)
        rows = "".join(json.dumps({"text": t}) + "\n" for t in TEXT * 3)
        data_commit = hub.add_commit("org/text", {"train.jsonl": rows}, repo_type="dataset")
        hub.add_commit("someone/private", {"config.json": b"{}"})
        hub.set_private("someone/private")
        env = _env(hub, root / "hf")
        run = root / "run"
        _ok(_runner(env, *TRAIN, "after.push_to_hub=org/x", f"hydra.run.dir={run}"))
        merged = root / "merged"
        exports = {"adapter": _runner(env, "export", str(run), "--push-to-hub", "org/tuned"),
                   "merged": _runner(env, "export", str(run), "--merge", "--out", str(merged), "--push-to-hub",
                                     "org/tuned-merged", "--private")}
        yield Pushed(hub, env, run, base_commit, data_commit, merged, exports)


def _card(hub: LoopbackHub, repo: str) -> str:
    return hub.read(repo, "README.md").decode()


@pytest.mark.slow
def test_the_end_of_a_run_pushes_its_export_after_its_report(pushed: Pushed) -> None:

    hub, run = pushed.hub, pushed.run
    files = hub.files("org/x")
    assert {"adapter_config.json", "adapter_model.safetensors", "runner_export.json", "README.md",
            "tokenizer.json", ".gitattributes"} <= set(files)
    commit = hub.repo("org/x").branches["main"]
    report = json.loads((run / "report.json").read_text())
    assert report["run/pushed_to"] == f"{hub.endpoint}/org/x (commit {commit})"
    assert "pushed to the Hub" in (run / "report.md").read_text()
    # the pushed adapter names its base by its Hub name and commit, not this machine's snapshot folder
    for config in (json.loads(hub.read("org/x", "adapter_config.json")),
                   json.loads((run / "model" / "adapter_config.json").read_text())):
        assert (config["base_model_name_or_path"], config["revision"]) == ("org/tiny", pushed.base_commit)
    assert json.loads((run / "model" / "runner_export.json").read_text())["adapter"]["base_hub"] == {
        "name": "org/tiny", "commit": pushed.base_commit}
    assert _card(hub, "org/x") == hub.read("org/x", "README.md").decode()
    assert (run / "model" / "README.md").read_text() != _card(hub, "org/x")  # the local export keeps its own
    assert hub.unhandled == []


@pytest.mark.slow
def test_export_pushes_an_adapter_and_a_merged_model_that_load_back_by_name(pushed: Pushed) -> None:
    hub = pushed.hub
    for name, proc in pushed.exports.items():
        assert "runner export: pushed" in _ok(proc), name
    assert not any(p.name.startswith(".push-") for p in pushed.run.iterdir())  # the temporary export is gone
    assert (pushed.merged_out / "config.json").is_file()  # --out kept
    assert hub.repo("org/tuned-merged").private and not hub.repo("org/tuned").private
    assert "adapter_config.json" not in hub.files("org/tuned-merged")
    out = _client(pushed.env, f"""
        import torch
        from peft import AutoPeftModelForCausalLM, PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        x = AutoTokenizer.from_pretrained("org/tuned")("def add(a, b):", return_tensors="pt")["input_ids"]
        with torch.no_grad():
            base = AutoModelForCausalLM.from_pretrained("org/tiny", revision="{pushed.base_commit}").eval()
            plain = base(input_ids=x).logits
            adapted = PeftModel.from_pretrained(base, "org/tuned").eval()(input_ids=x).logits
            by_name = AutoPeftModelForCausalLM.from_pretrained("org/tuned").eval()(input_ids=x).logits
            merged = AutoModelForCausalLM.from_pretrained("org/tuned-merged").eval()(input_ids=x).logits
        out["trained"] = float((adapted - plain).abs().max())
        out["by_name"] = float((by_name - adapted).abs().max())
        out["merged"] = float((merged - adapted).abs().max())
        """)
    assert out["trained"] > 1e-3, out  # the adapter trained: not the base's logits
    assert out["by_name"] == 0.0 and out["merged"] < 1e-4, out
    assert hub.unhandled == []


@pytest.mark.slow
def test_the_card_says_what_it_was_trained_from_how_and_how_to_load_it(pushed: Pushed) -> None:
    adapter, merged = _card(pushed.hub, "org/tuned"), _card(pushed.hub, "org/tuned-merged")
    meta = adapter.split("---")[1]
    assert "base_model: org/tiny" in meta and "library_name: peft" in meta and "- org/text" in meta, meta
    assert "- runner" in meta and "- lora" in meta and "pipeline_tag: text-generation" in meta, meta
    assert f"org/tiny]({pushed.hub.endpoint}/org/tiny) at commit `{pushed.base_commit}`" in adapter  # its Hub's page
    assert f"at commit `{pushed.data_commit}`, config `default`, split `train`" in adapter
    assert "Objective: `sft`" in adapter and "r=4, alpha=8" in adapter and "3 steps" in adapter
    assert "(`val/loss`)" in adapter
    assert f'AutoModelForCausalLM.from_pretrained("org/tiny", revision="{pushed.base_commit}")' in adapter
    assert 'PeftModel.from_pretrained(base, "org/tuned")' in adapter
    assert "library_name: transformers" in merged and "- merged" in merged
    assert 'AutoModelForCausalLM.from_pretrained("org/tuned-merged")' in merged
    assert "Merged: the adapter was folded into the base weights" in merged


REFUSALS = """\
import contextlib, io, os, shutil
from pathlib import Path
from runner.after.cli import main

def call(*args):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["export", *args])
    return [code, err.getvalue()]
"""


@pytest.mark.slow
def test_bad_input_is_refused_before_anything_is_built_or_sent(pushed: Pushed, tmp_path: Path) -> None:
    """A repo id that is no ORG/NAME, no token, a run with no export to push, --private alone: exit 2, one
    paragraph, nothing sent to the Hub."""
    hub, run = pushed.hub, pushed.run
    bare = tmp_path / "bare"  # a run whose checkpoints are gone and whose export was never written
    bare.mkdir()
    (bare / ".hydra").symlink_to(run / ".hydra")
    hub.clear_requests()
    out = _client(pushed.env, REFUSALS + textwrap.dedent(f"""
        run, bare = "{run}", "{bare}"
        out["no_org"] = call(run, "--push-to-hub", "tuned")
        out["bad_name"] = call(run, "--push-to-hub", "org/bad name")
        out["private_alone"] = call(run, "--private")
        out["no_export"] = call(bare, "--push-to-hub", "org/y")
        out["merge_no_ckpt"] = call(bare, "--merge", "--push-to-hub", "org/y")
        del os.environ["HF_TOKEN"]
        out["no_token"] = call(run, "--push-to-hub", "org/y")
        """))
    for name, (code, err) in out.items():
        assert code == 2 and err.count("\n") == 1 and err.startswith("runner export: "), (name, err)
    assert "'tuned' has no ORG/ before the name" in out["no_org"][1]
    assert "holds ' '" in out["bad_name"][1] and "ORG/NAME" in out["bad_name"][1]
    assert "--private goes with --push-to-hub" in out["private_alone"][1]
    assert "has no export to push" in out["no_export"][1] and "runner resume" in out["no_export"][1]
    assert "no whole export in" in out["no_export"][1]
    assert "has no export to push" in out["merge_no_ckpt"][1]
    assert "export HF_TOKEN=hf_..." in out["no_token"][1] and "`hf auth login`" in out["no_token"][1]
    assert hub.requests == [], hub.requests  # nothing asked of the Hub, so nothing uploaded


HUB_REFUSALS = REFUSALS + """\
import json, logging
from huggingface_hub import snapshot_download
from runner.after.at_end import push_at_end
from runner.after.source import run_config

os.environ["HF_TOKEN"] = "hf_wrong"
out["401"] = call(RUN, "--push-to-hub", "org/y")
os.environ["HF_TOKEN"] = TOKEN
out["403"] = call(RUN, "--push-to-hub", "elsewhere/y")
out["404"] = call(RUN, "--push-to-hub", "someone/private")

warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("runner.after.at_end").addHandler(Keep())
cfg = run_config(Path(RUN))
cfg.after.push_to_hub = "elsewhere/z"
out["at_end"] = push_at_end(cfg, Path(RUN), {"run/export": str(Path(RUN) / "model")})["run/pushed_to"]
out["warnings"] = warnings

# the pushed adapter, downloaded where its base's folder is not: runner generate fetches the base by name and commit
copy = Path(RUN).parent / "downloaded"
shutil.copytree(snapshot_download("org/tuned"), copy)
meta = json.loads((copy / "runner_export.json").read_text())
meta["adapter"]["base"] = str(Path(RUN).parent / "gone")
(copy / "runner_export.json").write_text(json.dumps(meta))
def generate(where):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = main(["generate", where, "--prompt", "def add(", "--max-new-tokens", "6", "--temperature", "0"])
    return [code, text.getvalue()]
out["generate"] = {"downloaded": generate(str(copy)), "run": generate(RUN)}

# a run whose checkpoints are gone: its own export is pushed as it is (and --merge, a new export, is refused)
kept = Path(RUN).parent / "no-checkpoints"
kept.mkdir()
for name in (".hydra", "model", "report.json"):
    (kept / name).symlink_to(Path(RUN) / name)
out["own"] = call(str(kept), "--push-to-hub", "org/own")
out["own_merge"] = call(str(kept), "--merge", "--push-to-hub", "org/own-merged")

# runner eval, then the merged model pushed over org/own's adapter: its card holds eval/*, the adapter's files go
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["eval", RUN]) == 0
out["merged_over"] = call(RUN, "--merge", "--push-to-hub", "org/own")

# an adapter over a base built from its configuration: the base is pushed in base/, and loads from there
out["scratch"] = call(SCRATCH, "--push-to-hub", "org/scratch")
import torch
from huggingface_hub import snapshot_download
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
DIR = snapshot_download("org/scratch")  # as its card says
x = AutoTokenizer.from_pretrained(f"{DIR}/base")("def add(a, b):", return_tensors="pt")["input_ids"]
with torch.no_grad():
    base = AutoModelForCausalLM.from_pretrained(f"{DIR}/base").eval()
    plain = base(input_ids=x).logits
    adapted = PeftModel.from_pretrained(base, DIR).eval()(input_ids=x).logits
out["scratch_trained"] = float((adapted - plain).abs().max())
"""


@pytest.fixture(scope="module")
def after_push(pushed: Pushed, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The Hub's refusals of ``runner export --push-to-hub``, a failed push at the end of a run, ``runner generate``
    of the pushed adapter downloaded, pushes of a run without checkpoints, of a merged model over an adapter and of
    an adapter whose base was built from its configuration: one process."""
    from tests.after_runs import LLAMA, train

    scratch = train(tmp_path_factory.mktemp("scratch") / "run", [*LLAMA, "peft=lora", "optimizer.lr=3e-2"]).run_dir
    return _client(pushed.env, f"RUN, TOKEN, SCRATCH = {str(pushed.run)!r}, {TOKEN!r}, {str(scratch)!r}\n"
                   + HUB_REFUSALS)


@pytest.mark.slow
def test_the_hubs_refusals_are_a_paragraph_each_and_fail_no_run(pushed: Pushed, after_push: dict[str, Any]) -> None:
    """401 (a token the Hub does not take) and 403 (a namespace the token may not write to) before the export is
    built, 404 (another account's private repo) at the push; at the end of a run, a warning and the figure with the
    command that pushes again."""
    hub, out = pushed.hub, after_push
    for status in ("401", "403", "404"):
        code, err = out[status]
        assert code == 2 and err.count("\n") == 1 and f"({status}: " in err and "Nothing was pushed" in err, err
    assert "refused the token" in out["401"][1] and "export HF_TOKEN=hf_..." in out["401"][1]
    assert "elsewhere is neither your user name nor an organisation" in out["403"][1]
    assert "YOUR_NAME/y" in out["403"][1]
    assert "no repo someone/private this token may see" in out["404"][1]
    assert not any(repo_id in ("org/y", "elsewhere/y", "elsewhere/z") for _, repo_id in hub.repos)
    command = f"python -m runner export {pushed.run} --push-to-hub elsewhere/z"
    assert out["at_end"].startswith("failed: PushError: after.push_to_hub=elsewhere/z: the Hub refused") and \
        out["at_end"].endswith(f"Push it again: {command}"), out["at_end"]
    assert any(command in w and "not pushed" in w for w in out["warnings"]), out["warnings"]
    assert hub.files("someone/private") == ["config.json"] and hub.unhandled == []
    own = hub.repo("org/own")  # its adapter push; a merged model was pushed over it since
    adapter_push = own.commits[own.branches["main"]].parent
    assert out["own"][0] == 0 and adapter_push is not None
    assert hub.read("org/own", "adapter_model.safetensors", adapter_push) == \
        (pushed.run / "model" / "adapter_model.safetensors").read_bytes()
    assert out["own_merge"][0] == 2 and "--merge write a new export from a checkpoint" in out["own_merge"][1]
    assert ("model", "org/own-merged") not in hub.repos


@pytest.mark.slow
def test_a_push_replaces_what_an_earlier_one_left_and_a_written_base_loads_from_base(
        pushed: Pushed, after_push: dict[str, Any]) -> None:
    hub, out = pushed.hub, after_push
    assert out["merged_over"][0] == 0 and out["scratch"][0] == 0, out
    files = hub.files("org/own")
    assert "config.json" in files and "adapter_config.json" not in files and "adapter_model.safetensors" not in files
    assert len(hub.repo("org/own").commits) == 3  # created, the adapter, the merged model: the adapter in history
    card = _card(hub, "org/own")
    assert "## Evaluation (runner eval)" in card and "(`eval/loss`)" in card
    assert {"base/config.json", "base/model.safetensors", "adapter_config.json"} <= set(hub.files("org/scratch"))
    scratch = _card(hub, "org/scratch")
    assert "base_model:" not in scratch and "built from its configuration (random weights)" in scratch
    assert 'DIR = snapshot_download("org/scratch")' in scratch and 'from_pretrained(f"{DIR}/base")' in scratch
    assert 'tokenizer = AutoTokenizer.from_pretrained(f"{DIR}/base")' in scratch
    assert json.loads(hub.read("org/scratch", "adapter_config.json"))["base_model_name_or_path"] is None
    assert out["scratch_trained"] > 1e-4, out


@pytest.mark.slow
def test_a_downloaded_adapter_whose_base_folder_is_gone_generates_from_the_base_by_name(
        after_push: dict[str, Any]) -> None:
    downloaded, run = after_push["generate"]["downloaded"], after_push["generate"]["run"]
    assert downloaded[0] == run[0] == 0 and downloaded[1] == run[1] and run[1].startswith("def add("), after_push


# ---- refused at launch, in this process (no Hub needed) -----------------------------------------------------------

@pytest.mark.parametrize(("repo_id", "said"), [
    ("tuned", "has no ORG/"), ("org/a/b", "more than one '/'"), ("org/bad name", "holds ' '"),
    ("org/-x", "starts a part"), ("org/a--b", "'--'"), ("org/" + "n" * 97, "the Hub's longest is 96"),
])
def test_a_repo_id_that_is_no_org_name_is_refused(repo_id: str, said: str) -> None:
    problem = repo_id_error(repo_id, "--push-to-hub x")
    assert problem is not None and said in problem and "ORG/NAME" in problem, problem
    assert repo_id_error("my-org/llama_lora.v2", "--push-to-hub x") is None


@pytest.fixture
def no_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from huggingface_hub import constants

    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))


@pytest.mark.parametrize(("overrides", "said"), [
    (["after.push_to_hub=tuned"], "after.push_to_hub=tuned: 'tuned' has no ORG/"),
    (["after.push_to_hub=org/x", "after.export=false"], "after.export=false writes none"),
    (["after.push_to_hub=org/x"], "export HF_TOKEN=hf_..."),
    (["after.push_to_hub=org/x", "trainer=fsdp"], "an FSDP run exports nothing at the end of its fit"),
])
def test_after_push_to_hub_is_refused_at_launch(no_token: None, overrides: list[str], said: str,
                                                tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="after.push_to_hub") as e:
        load(compose(["+recipe=smoke", *overrides], run_dir=str(tmp_path)))
    assert said in str(e.value), str(e.value)


def test_after_push_to_hub_with_a_token_passes_its_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_anything")
    cfg = load(compose(["+recipe=smoke", "after.push_to_hub=org/x", "after.push_private=true"],
                       run_dir=str(tmp_path)))
    assert (cfg.after.push_to_hub, cfg.after.push_private) == ("org/x", True)
