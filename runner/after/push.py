"""An export pushed to the Hugging Face Hub in one commit, with a model card as its README (``runner export RUN_DIR
--push-to-hub ORG/NAME``, ``after.push_to_hub``): the repo's files become the export's, and every refusal, the Hub's
included, is a :class:`PushError` with the fix."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.config import ConfigError
from runner.config.checks.push import TOKEN_FIX
from runner.config.composing.hub_names import pins_of
from runner.config.decisions.peft import ADAPTER_CONFIG
from runner.config.schema import RunConfig
from runner.hub import TRANSFER_S, bounded_http, endpoint

log = logging.getLogger(__name__)

CARD = "README.md"


class PushError(ConfigError):
    """A push that cannot be made, or that the Hub refused: one paragraph with the fix (exit code 2)."""


@dataclass(frozen=True)
class Pushed:
    """A push made: the repo, its page, the commit it made and how many files it holds."""

    repo_id: str
    url: str
    commit: str
    files: int


# ---- the Hub -------------------------------------------------------------------------------------------------------


def open_repo(repo_id: str, private: bool, where: str) -> str:
    """Create the model repo ``repo_id`` where it does not exist; its page, or the Hub's refusal as a PushError."""
    from huggingface_hub import HfApi

    with bounded_http(), _hub_errors(repo_id, where):
        return str(HfApi().create_repo(repo_id, private=private, exist_ok=True, repo_type="model"))


def push_folder(folder: Path, repo_id: str, written: Mapping[str, bytes], private: bool, where: str,
                message: str) -> Pushed:
    """Commit ``folder``'s files to ``repo_id`` (created where it does not exist), those of ``written`` (the card)
    with its contents instead, and delete what an earlier push left that neither holds."""
    # An adapter's adapter_config.json left beside a merged model would make transformers load an adapter.
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    names: dict[str, str | bytes] = {p.relative_to(folder).as_posix(): str(p)
                                     for p in sorted(folder.rglob("*")) if p.is_file()}
    names.update(written)
    api = HfApi()
    with bounded_http(), _hub_errors(repo_id, where):
        url = str(api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model"))
        info = api.model_info(repo_id, timeout=TRANSFER_S)
        there = [s.rfilename for s in info.siblings or []]
        ops: list[Any] = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=content)
                          for name, content in names.items()]
        ops += [CommitOperationDelete(path_in_repo=name) for name in there
                if name not in names and name != ".gitattributes"]
        commit = api.create_commit(repo_id, operations=ops, commit_message=message, repo_type="model")
    return Pushed(repo_id, url.rstrip("/"), commit.oid, len(names))


@contextlib.contextmanager
def _hub_errors(repo_id: str, where: str) -> Iterator[None]:
    """The Hub's refusals and a Hub that cannot be reached, as :class:`PushError` paragraphs."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    try:
        yield
    except HfHubHTTPError as e:
        raise PushError(http_refusal(e, repo_id, where)) from e
    except ValueError as e:  # huggingface_hub's word for the Hub's refusal of the card's metadata (validate-yaml)
        raise PushError(f"{where}: the Hub refused the model card's metadata ({' '.join(str(e).split())}). Nothing "
                        "was pushed.") from e
    except (httpx2.TransportError, OSError) as e:  # connection refused, a timeout, a dropped connection
        from huggingface_hub import constants

        raise PushError(f"{where}: the Hub ({constants.ENDPOINT}) could not be reached or stopped answering "
                        f"({type(e).__name__}: {_first_line(e)}). Nothing was pushed (a commit is whole or absent). "
                        "Check the network (and HF_ENDPOINT, where it is set), then push again.") from e


def http_refusal(error: Any, repo_id: str, where: str) -> str:
    """The paragraph for the Hub's answer ``error`` (an ``HfHubHTTPError``) to a push to ``repo_id``."""
    from huggingface_hub import constants

    status = getattr(getattr(error, "response", None), "status_code", None)
    said = getattr(error, "server_message", None) or _first_line(error)
    org, _, name = repo_id.partition("/")
    page = f"{constants.ENDPOINT}/{repo_id}"
    if status == 401:
        return (f"{where}: the Hub ({constants.ENDPOINT}) refused the token (401: {said}): it is invalid, expired or "
                f"revoked. Give a valid one: {TOKEN_FIX}. Nothing was pushed.")
    if status == 403:
        return (f"{where}: the Hub refused to let this token write to {repo_id} (403: {said}). Either the token is "
                "read-only or fine-grained without write access to it (make one with write access at "
                "https://huggingface.co/settings/tokens and give it: export HF_TOKEN=hf_...), or "
                f"{org} is neither your user name nor an organisation you may write to: push to YOUR_NAME/{name} or "
                "to an organisation where you have write rights. Nothing was pushed.")
    if status == 404:
        return (f"{where}: the Hub ({constants.ENDPOINT}) has no repo {repo_id} this token may see (404: {said}): it "
                f"is private to another account, or {org} does not exist. Check it at {page}, or push to a repo of "
                f"your own (YOUR_NAME/{name}). Nothing was pushed.")
    if status in (409, 412):
        return (f"{where}: {repo_id} changed on the Hub while this push was made ({status}: {said}). Push again; "
                "nothing was pushed.")
    return (f"{where}: the Hub ({constants.ENDPOINT}) answered {status} to the push ({said}). Nothing was pushed "
            "(a commit is whole or absent); push again later.")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# ---- the card ------------------------------------------------------------------------------------------------------

def model_card(export: Path, repo_id: str, cfg: RunConfig, report: Mapping[str, Any],
               evaluation: Mapping[str, Any] | None = None) -> str:
    """The model card of ``export`` pushed as ``repo_id``: the Hub's metadata, where from, how, figures, loading."""
    from huggingface_hub import ModelCard, ModelCardData

    meta = json.loads((export / "runner_export.json").read_text())
    records = [p.record() for p in pins_of(cfg)]
    by_key = {r["key"]: r for r in records}
    base = by_key.get("model.path")
    adapter = meta.get("adapter")
    family, task = str(meta.get("family")), str(meta.get("task"))
    method = cfg.peft.method.value
    datasets = sorted({r["name"] for r in records if r["type"] == "dataset"})
    tags = ["runner", *([method] if method != "none" else []), cfg.objective.loss.value]
    if meta.get("merged"):
        tags.append("merged")
    library = "peft" if adapter else {"hf_causal_lm": "transformers", "hf_classifier": "transformers",
                                      "timm": "timm"}.get(family)
    pipeline = "image-classification" if family == "timm" else \
        {"causal_lm": "text-generation", "classification": "text-classification"}.get(task)
    data = ModelCardData(base_model=base["name"] if base else None, datasets=datasets or None, library_name=library,
                         tags=tags, pipeline_tag=pipeline)
    what = ("a LoRA adapter" if method == "lora" else "a QLoRA adapter") if adapter else \
        "the adapter merged into its base, one model" if meta.get("merged") else "the whole model"
    lines = [f"# {repo_id}", "",
             f"{what[0].upper()}{what[1:]}, fine-tuned with runner ({cfg.objective.loss.value}, "
             f"{_steps(report, meta)}).", ""]
    lines += ["## Trained from", "", *_sources(cfg, base, by_key, adapter), ""]
    lines += ["## How", "", *_how(cfg, report, meta, adapter), ""]
    lines += _figures(report, evaluation)
    lines += ["## Load it", "", *_loading(export, repo_id, family, task, adapter, base, meta), ""]
    if meta.get("tokenizer"):
        # The export's note on its ids, without this machine's folders (a tokenizer saved in a snapshot of the base).
        where = f"of {base['name']} (the base's)" if base is not None and "snapshots/" in meta["tokenizer"] else \
            "exported beside the model"
        lines += ["Text: " + re.sub(r"saved in \S+", where, str(meta["tokenizer"])) + ".", ""]
    if meta.get("labels"):
        lines += [f"Classes by id: {', '.join(meta['labels'])}.", ""]
    if meta.get("prompt"):  # an instruction run: how to ask it as it was trained
        from runner.after.export_prompt import readme_lines

        chat = (export / "chat_template.jinja").is_file() or \
            "chat_template" in read_json(export / "tokenizer_config.json")
        download = f'a download of this repo (`DIR = huggingface_hub.snapshot_download("{repo_id}")`)'
        lines += [line.replace("runner generate DIR --prompt QUESTION`", "runner generate DIR --prompt QUESTION` on "
                               + download) for line in readme_lines(meta["prompt"], "" if chat else None)]
    lines += ["Everything runner knows about it (the model's config as it was applied, the checkpoint and step, how "
              "text becomes ids): `runner_export.json`.", ""]
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)))


def _steps(report: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    run = report.get("run/steps")
    step = meta.get("step")
    if run is not None and step is not None and run != step:
        return f"the weights of step {step} of a {run}-step run"
    return f"{step if step is not None else run} steps"


def _sources(cfg: RunConfig, base: Mapping[str, Any] | None, by_key: Mapping[str, Mapping[str, Any]],
             adapter: Mapping[str, Any] | None) -> list[str]:
    """The base model, the data and the tokenizer, each with its commit where it came from the Hub."""
    out = []
    path = getattr(cfg.model, "path", None)
    if base is not None:
        asked = f" (asked for `{base['revision']}`)" if base["revision"] != base["commit"] else ""
        out.append(f"- Base model: [{base['name']}]({endpoint()}/{base['name']}) at commit "
                   f"`{base['commit']}`{asked}.")
    elif path:
        out.append(f"- Base model: a local folder, `{path}` (not on the Hub).")
    elif adapter:
        out.append("- Base model: built from its configuration (random weights); it is this repo's `base/` folder.")
    else:
        out.append("- Base model: none; the model was built from its configuration (random weights) and trained.")
    for key, label in (("data.path", "Training data"), ("data.val_path", "Validation data")):
        record = by_key.get(key)
        value = getattr(cfg.data, key.split(".", 1)[1], None)
        if record is not None:
            out.append(f"- {label}: [{record['name']}]({endpoint()}/datasets/{record['name']}) at commit "
                       f"`{record['commit']}`, config `{record.get('config', 'default')}`, split "
                       f"`{record.get('split', 'train')}`.")
        elif value:
            out.append(f"- {label}: a local file or folder, `{value}` (not on the Hub).")
        elif key == "data.path":
            out.append(f"- {label}: runner's built-in data of "
                       f"`{getattr(cfg.data, '_target_', None) or type(cfg.data).__name__}`.")
    if by_key.get("data.val_path") is None and not getattr(cfg.data, "val_path", None):
        share = getattr(cfg.data, "val_fraction", None)
        out.append("- Validation: a seeded share of the training rows" +
                   (f" (data.val_fraction={share})." if share else "."))
    tokens = by_key.get("data.tokenizer")
    if tokens is not None and tokens["name"] != (base or {}).get("name"):
        out.append(f"- Tokenizer: {tokens['name']} at commit `{tokens['commit']}`.")
    return out


def _how(cfg: RunConfig, report: Mapping[str, Any], meta: Mapping[str, Any],
         adapter: Mapping[str, Any] | None) -> list[str]:
    """The objective and its settings, the adapter's, and the training's."""
    from runner.config.schema.objective import Loss

    o = cfg.objective
    reference = report.get("objective/reference") or o.reference.value  # the one auto chose, where the run said
    by_loss: dict[Loss, dict[str, Any]] = {
        Loss.sft: {}, Loss.dpo: {"beta": o.beta, "label_smoothing": o.label_smoothing, "reference": reference},
        Loss.simpo: {"beta": o.beta, "gamma": o.gamma, "label_smoothing": o.label_smoothing},
        Loss.orpo: {"beta": o.beta}}
    settings = by_loss[o.loss]
    said = ", ".join(f"{k}={v}" for k, v in settings.items())
    what = {Loss.sft: "cross-entropy of the data's targets", Loss.dpo: "Direct Preference Optimization",
            Loss.simpo: "SimPO", Loss.orpo: "ORPO"}[o.loss]
    out = [f"- Objective: `{o.loss.value}` ({what})" + (f": {said}." if said else ".")]
    p = cfg.peft
    if p.method.value != "none":
        targets = list((adapter or {}).get("targets") or [])
        kinds = sorted({t.rsplit(".", 1)[-1] for t in targets or p.target_modules})
        count = len(targets) or (meta["merged"] if isinstance(meta.get("merged"), int) else 0)
        on = (f"on {count} linears" if count else "on every linear of the model's blocks") + \
            (f" ({', '.join(f'`{k}`' for k in kinds)})" if kinds else "")
        saved = list((adapter or {}).get("modules_to_save") or [])
        out.append(f"- Adapter: `{p.method.value}`, r={p.r}, alpha={p.alpha:g}, dropout={p.dropout:g}, {on}"
                   + (f"; trained in full beside it: {', '.join(f'`{m}`' for m in saved)}" if saved else "") + ".")
        if meta.get("merged"):
            out.append("- Merged: the adapter was folded into the base weights (`runner export --merge`)"
                       + (", dequantized from NF4" if meta.get("dequantized") else "") + ": one model, no peft needed.")
    else:
        out.append("- Every weight trained (a full fine-tune).")
    training = [_steps(report, meta), *(f"{k} {v}" for k, v in (
        ("lr", getattr(cfg.optimizer, "lr", None)), ("batch size", getattr(cfg.data, "batch_size", None)),
        ("sequence length", getattr(cfg.data, "seq_len", None)), ("precision", cfg.trainer.precision),
        ("seed", cfg.seed)) if v is not None)]
    out.append(f"- Training: {', '.join(training)}.")
    return out


def _figures(report: Mapping[str, Any], evaluation: Mapping[str, Any] | None) -> list[str]:
    """The run's validation figures (``val/*``), and ``runner eval``'s where the run has them."""
    out: list[str] = []
    for title, figures, key in (("Validation (the run's last validation)", report, "val/loss"),
                                ("Evaluation (runner eval)", evaluation or {}, "eval/loss")):
        prefix = key.split("/")[0] + "/"  # the namespace: every figure of it
        rows = [(k, v) for k, v in sorted(figures.items())
                if k.startswith(prefix) and isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not rows:
            continue
        out += [f"## {title}", "", "| figure | value |", "|---|---|"]
        out += [f"| {_label(k)} (`{k}`) | {v:.4g} |" for k, v in rows]
        out.append("")
    return out


def _label(key: str) -> str:
    from runner.metrics import metric

    try:
        return metric(key).label or key
    except KeyError:
        return key


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()


def _loading(export: Path, repo_id: str, family: str, task: str, adapter: Mapping[str, Any] | None,
             base: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> list[str]:
    """How to load it by name, as code."""
    auto = "AutoModelForSequenceClassification" if task == "classification" else "AutoModelForCausalLM"
    no_ids = "# no tokenizer was exported: runner_export.json's tokenizer says how text becomes ids"
    if adapter and family.startswith("hf_"):
        if adapter.get("base_written"):  # the base in base/: from a download (transformers would read the adapter)
            tokens = next((f'tokenizer = AutoTokenizer.from_pretrained({where})' for where, folder in
                           (("DIR", export), ('f"{DIR}/base"', export / "base")) if _has_tokenizer(folder)), no_ids)
            return ["```python", "from huggingface_hub import snapshot_download", "from peft import PeftModel",
                    f"from transformers import AutoTokenizer, {auto}", "",
                    f'DIR = snapshot_download("{repo_id}")  # the adapter, and in base/ the base it was trained over',
                    f'base = {auto}.from_pretrained(f"{{DIR}}/base")', "model = PeftModel.from_pretrained(base, DIR)",
                    tokens, "```"]
        if base is not None:
            where = f'"{base["name"]}", revision="{base["commit"]}"'
        else:
            where = f'"{adapter.get("base")}"  # the local base it was trained over'
        code = ["from peft import PeftModel", f"from transformers import AutoTokenizer, {auto}", "",
                f"base = {auto}.from_pretrained({where})", f'model = PeftModel.from_pretrained(base, "{repo_id}")',
                f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")' if _has_tokenizer(export) else no_ids]
        if base is not None:
            peft_auto = "AutoPeftModelForSequenceClassification" if task == "classification" else \
                "AutoPeftModelForCausalLM"
            code += ["", "# or in one line: adapter_config.json names the base and its commit",
                     f"from peft import {peft_auto}", f'model = {peft_auto}.from_pretrained("{repo_id}")']
        return ["```python", *code, "```"]
    if family.startswith("hf_"):
        return ["```python", f"from transformers import AutoTokenizer, {auto}", "",
                f'model = {auto}.from_pretrained("{repo_id}")',
                f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")' if _has_tokenizer(export) else no_ids, "```"]
    if family == "timm" and not adapter:
        return ["```python", "import timm", "", f'model = timm.create_model("hf-hub:{repo_id}", pretrained=True)',
                "```"]
    return ["```python", "from huggingface_hub import snapshot_download", "",
            f'DIR = snapshot_download("{repo_id}")', "```", "",
            f"then, as runner_export.json says: {meta.get('load')}."]


# ---- what the commands call ----------------------------------------------------------------------------------------

def read_json(path: Path) -> dict[str, Any]:
    """A JSON file's object, or {} where it is absent or unreadable."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def push_export(export: Path, repo_id: str, private: bool, cfg: RunConfig, run_dir: Path,
                report: Mapping[str, Any], where: str) -> Pushed:
    """Push ``export`` (a folder ``runner export`` wrote for the run in ``run_dir``) to ``repo_id`` with its card."""
    card = model_card(export, repo_id, cfg, report, read_json(run_dir / "eval.json") or None)
    meta = read_json(export / "runner_export.json")
    written = {CARD: card.encode()}
    if (meta.get("adapter") or {}).get("base_written"):  # the base is base/ of the repo, not the folder it names here
        config = read_json(export / ADAPTER_CONFIG)
        config["base_model_name_or_path"] = None
        written[ADAPTER_CONFIG] = (json.dumps(config, indent=2) + "\n").encode()
    message = f"runner export of {run_dir.name} (step {meta.get('step')})"
    return push_folder(export, repo_id, written, private, where, message)

