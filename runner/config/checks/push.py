"""Checks of a push to the Hugging Face Hub (``after.push_to_hub``, ``runner export --push-to-hub``): the repo id, a
token and an export to push. Offline: ``runner.after.push`` calls the Hub once these pass."""

from __future__ import annotations

import re

from runner.config.schema import RunConfig

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_NAME = 96  # The Hub's longest repo name (the part after the /).
TOKEN_FIX = ("export HF_TOKEN=hf_... (a token with write access: https://huggingface.co/settings/tokens) or "
             "`hf auth login`")


def repo_id_error(repo_id: str, where: str) -> str | None:
    """Why ``repo_id`` (given as ``where``: ``after.push_to_hub=...``, ``--push-to-hub ...``) is no Hub model repo
    ``ORG/NAME``, in one paragraph; None when it is one."""
    fix = ("Give the repo as ORG/NAME (your user name or an organisation you may write to, a slash, the model's "
           "name: letters, digits, '-', '_' and '.'), e.g. my-org/llama-lora.")
    if repo_id.count("/") != 1:
        what = "has no ORG/ before the name" if "/" not in repo_id else "has more than one '/'"
        return f"{where}: {repo_id!r} {what}. {fix}"
    name = repo_id.split("/")[1]
    if not _REPO_ID.match(repo_id):
        bad = sorted({c for c in repo_id if not (c.isascii() and (c.isalnum() or c in "._-/"))})
        what = (f"holds {', '.join(map(repr, bad))}" if bad else
                "starts a part with '.', '-' or '_', or has an empty part")
        return f"{where}: {repo_id!r} {what}. {fix}"
    if "--" in repo_id or ".." in repo_id or name.endswith((".", "-")) or name.endswith(".git"):
        return (f"{where}: {repo_id!r}: the Hub refuses '--' and '..' in a repo id and a name ending in '.', '-' or "
                f".git. {fix}")
    if len(name) > MAX_NAME:
        return f"{where}: {repo_id!r}: the name is {len(name)} characters, the Hub's longest is {MAX_NAME}. {fix}"
    return None


def token_error(where: str) -> str | None:
    """Why there is no token to push with (``huggingface_hub.get_token()``: ``HF_TOKEN``, or the file ``hf auth
    login`` writes), or None."""
    from huggingface_hub import get_token

    if get_token() is not None:
        return None
    return (f"{where}: no Hugging Face token to push with (HF_TOKEN is unset and `hf auth login` has not saved one). "
            f"Give one: {TOKEN_FIX}.")


def check_push(cfg: RunConfig) -> str | None:
    """``after.push_to_hub``: a repo id, a token, and an export at the end of the fit to push."""
    after = cfg.after
    if after.push_to_hub is None:
        return None
    where = f"after.push_to_hub={after.push_to_hub}"
    if (problem := repo_id_error(after.push_to_hub, where)) is not None:
        return problem
    if not after.export:
        return (f"{where} pushes the export the run writes at the end of its fit, and after.export=false writes none. "
                "Drop after.export=false, or push later from a checkpoint: python -m runner export RUN_DIR "
                f"--push-to-hub {after.push_to_hub}.")
    if cfg.trainer.sharded:
        return (f"{where}: an FSDP run exports nothing at the end of its fit (its parameters are shards), so there is "
                "nothing to push then. Drop after.push_to_hub, set trainer.fsdp.consolidate=true and push the "
                "consolidated checkpoint afterwards: python -m runner export RUN_DIR --ckpt "
                f"checkpoints/consolidated.pt --push-to-hub {after.push_to_hub}.")
    return token_error(where)


CHECKS = [check_push]
