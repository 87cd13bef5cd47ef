"""What a run leaves at the end of its fit (the ``after`` node): the model exported to ``<run_dir>/model``, a text
sample for report.md, and the push to the Hub. None may fail a run that trained: a failure is logged with the
command that does it again."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from torch import nn

from runner.after.export import EXPORT_DIR, export_model
from runner.after.family import tokens_of, writes_text
from runner.after.generate import Sampling, write_text
from runner.after.prompting import asked
from runner.config.schema import RunConfig
from runner.quiet import quiet_transformers_bars
from runner.telemetry.data_report import read_prompt

log = logging.getLogger(__name__)


def at_end_of_fit(cfg: RunConfig, model: nn.Module, run_dir: Path, checkpoint: Path | None,
                  step: int) -> dict[str, Any]:
    """Export ``model`` and sample it, as ``cfg.after`` says; the figures (``run/export``, ``run/sample``)."""
    figures: dict[str, Any] = {}
    if cfg.trainer.sharded:  # FSDP2's parameters are shards: the whole model is in the consolidated checkpoint
        if cfg.after.export:
            figures["run/export"] = ("not at the end of an FSDP fit: python -m runner export RUN_DIR --ckpt "
                                   "checkpoints/consolidated.pt (trainer.fsdp.consolidate=true writes it)")
        return figures
    if cfg.after.export:
        out = figures["run/export"] = str(run_dir / EXPORT_DIR)
        try:
            with quiet_transformers_bars():
                export_model(model, cfg, run_dir, Path(out), str(checkpoint) if checkpoint else None, step)
        except Exception as e:  # noqa: BLE001 - the run trained and its checkpoint is on disk
            log.warning("the model was not exported (%s: %s); python -m runner export %s --force writes it from the "
                        "checkpoint", type(e).__name__, e, run_dir)
            figures["run/export"] = f"failed: {type(e).__name__}: {e}"
    tokens = tokens_of(cfg)
    if cfg.after.sample_tokens and writes_text(model) and tokens is not None:
        sampling = Sampling(max_new_tokens=cfg.after.sample_tokens, seed=cfg.seed)
        try:
            ask = asked(read_prompt(run_dir), cfg.after.sample_prompt, tokens, sampling)
            figures["run/sample"] = ask.prompt + write_text(model, tokens, ask.prompt, ask.sampling, ask.special)
        except Exception as e:  # noqa: BLE001 - a sample is a courtesy: the run trained
            log.warning("no sample for report.md (%s: %s); python -m runner generate RUN_DIR writes one",
                        type(e).__name__, e)
    return figures


def push_at_end(cfg: RunConfig, run_dir: Path, figures: dict[str, Any]) -> dict[str, Any]:
    """Push the end-of-fit export to ``after.push_to_hub`` once report.json (``figures``) is written."""
    repo_id = cfg.after.push_to_hub
    if repo_id is None:
        return {}
    from runner.after.push import push_export

    private = " --private" if cfg.after.push_private else ""
    command = f"python -m runner export {run_dir} --push-to-hub {repo_id}{private}"  # what pushes it again
    export = run_dir / EXPORT_DIR
    if figures.get("run/export") != str(export):  # no export: the fit did not finish, or the export failed
        why = figures.get("run/export") or "the fit did not finish, so nothing was exported"
        log.warning("the model was not pushed to %s (no export: %s); %s pushes it from the checkpoint", repo_id, why,
                    command)
        return {"run/pushed_to": f"not pushed (no export: {why}); {command}"}
    try:
        with quiet_transformers_bars():
            pushed = push_export(export, repo_id, cfg.after.push_private, cfg, run_dir, figures,
                                 f"after.push_to_hub={repo_id}")
    except Exception as e:  # noqa: BLE001 - the run trained, and its export is on disk
        log.warning("the model was not pushed to the Hugging Face Hub: %s The run and its export (%s) are whole; %s "
                    "pushes it again", e, export, command)
        return {"run/pushed_to": f"failed: {type(e).__name__}: {e} Push it again: {command}"}
    log.info("pushed %s to %s (commit %s)", export, pushed.url, pushed.commit)
    return {"run/pushed_to": f"{pushed.url} (commit {pushed.commit})"}
