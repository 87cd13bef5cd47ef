"""A fingerprint of the data a run reads, so that a resume notices data that changed under its checkpoint."""

from __future__ import annotations

import datetime
import glob
import json
import os
from pathlib import Path
from typing import Any

from runner.data.reading.corpus import walk_files
from runner.data.reading.tables import fingerprint
from runner.data.store import file_digests
from runner.data.tokens.tokenizers import is_bytes, saved_files

FILE = "data_fingerprint.json"
LISTED = 2000  # Files listed one by one (more are recorded by their count, their bytes and the digest of their stamps)
NAMED = 3  # Files a description names before it counts the rest


def _files(given: str) -> list[Path]:
    """Every file ``given`` names: itself, every file under a folder (hidden ones and caches left out), a glob's."""
    root = Path(given).expanduser()
    if any(c in given for c in "*?["):
        tops = [Path(m) for m in sorted(glob.glob(str(root), recursive=True))]
    else:
        tops = [root] if root.exists() else []
    return [f for top in tops for f in ([top] if top.is_file() else walk_files(top))]


def _entry(given: str | None) -> dict[str, Any] | None:
    """What one setting names, as recorded; None for built-in data."""
    if given is None:
        return None
    files = _files(given)
    stamps = []
    for f, digest in zip(files, file_digests(files), strict=True):
        st = f.stat()
        stamps.append((str(f.resolve()), st.st_size, st.st_mtime_ns, digest))
    entry: dict[str, Any] = {"given": given, "count": len(stamps), "bytes": sum(s[1] for s in stamps),
                             "content": True, "digest": fingerprint([(s[0], s[3]) for s in stamps])}
    if len(stamps) <= LISTED:
        entry["files"] = stamps
    saved = {Path(f[0]).parent.name: json.loads(Path(f[0]).read_text()).get("_fingerprint")
             for f in stamps if Path(f[0]).name == "state.json"}
    if saved:
        entry["datasets"] = saved
    return entry


def data_fingerprint(path: str | None, val_path: str | None, tokenizer: str | None,
                     text: bool = True) -> dict[str, Any]:
    """The fingerprint of the data ``data.path``, ``data.val_path`` and (``text``) ``data.tokenizer`` name."""
    tokens: Any = None if not text else "bytes" if is_bytes(tokenizer) else {
        "given": tokenizer, "files": [[f.name, d] for f, d in zip(saved_files(str(tokenizer)),
                                                                   file_digests(saved_files(str(tokenizer))),
                                                                   strict=True)]
        if Path(str(tokenizer)).expanduser().is_dir() else []}
    recorded = {"data.path": _entry(path), "data.val_path": _entry(val_path), "data.tokenizer": tokens}
    return json.loads(json.dumps(recorded))  # as it reads back from FILE (lists, not tuples): compared equal to it


def of_node(node: Any) -> dict[str, Any]:
    """The fingerprint of what a data config node (``cfg.data``: its ``path``, ``val_path``, ``tokenizer``) names."""
    return data_fingerprint(getattr(node, "path", None), getattr(node, "val_path", None),
                            getattr(node, "tokenizer", None), text=hasattr(node, "tokenizer"))


def read_fingerprint(run_dir: Path) -> dict[str, Any] | None:
    """What a run recorded (None: a run that recorded none, from before fingerprints or stopped before its fit)."""
    path = Path(run_dir) / FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _named(paths: list[str], root: str) -> str:
    """A few of ``paths`` by their names under ``root`` (the given folder), then how many more."""
    names = [os.path.relpath(p, root) if root and p.startswith(root) else Path(p).name for p in paths[:NAMED]]
    return ", ".join(names) + (f" and {len(paths) - NAMED} more" if len(paths) > NAMED else "")


def _same(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Whether two records of one setting name the same data: the same digest of the files' contents; a record of a run
    before digests were recorded (its files' sizes and times) is compared by those."""
    if old is None or new is None:
        return old is new
    if old.get("content") or "files" not in new:
        return bool(old["digest"] == new["digest"])
    return [f[:3] for f in old.get("files", [])] == [f[:3] for f in new["files"]]


def _file_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """How the files of one setting differ: added, removed, changed (size, time), datasets' fingerprints."""
    if "files" not in old or "files" not in new:
        return [f"{old['count']} files of {old['bytes']:,} bytes, now {new['count']} of {new['bytes']:,}"]
    same = (1, 3) if old.get("content") else (1, 2)  # what identifies a file: size and digest (before: and time)
    before = {f[0]: tuple(f[i] for i in same) for f in old["files"]}
    after = {f[0]: tuple(f[i] for i in same) for f in new["files"]}
    times = {f[0]: f[2] for f in new["files"]}
    given = Path(str(new["given"])).expanduser().resolve()
    root = str(given) if given.is_dir() else ""
    out = []
    changed = sorted((p for p in after if p in before and after[p] != before[p]),
                     key=lambda p: before[p][0] == after[p][0])  # a new size first: the likeliest new content
    for p in changed[:NAMED]:
        size0, size1 = before[p][0], after[p][0]
        size = f"{size0:,} -> {size1:,} bytes" if size0 != size1 else f"same size, {size1:,} bytes"
        when = datetime.datetime.fromtimestamp(times[p] / 1e9)
        out.append(f"{_named([p], root)} changed ({size}, modified {when:%Y-%m-%d %H:%M:%S})")
    if len(changed) > NAMED:
        out.append(f"{len(changed) - NAMED} more files changed")
    added, removed = [p for p in after if p not in before], [p for p in before if p not in after]
    if added:
        out.append(f"{len(added)} file(s) added ({_named(added, root)})")
    if removed:
        out.append(f"{len(removed)} file(s) gone ({_named(removed, root)})")
    for split, hashed in (new.get("datasets") or {}).items():
        if (old.get("datasets") or {}).get(split) not in (None, hashed):
            out.append(f"datasets' fingerprint of {split} changed")
    return out or ["its files' stamps changed"]


def _as_recorded(old: Any, new: Any) -> Any:
    """The tokenizer's record ``new`` as a run recorded ``old``: a run before digests recorded each file's name, size
    and modification time."""
    if not (isinstance(old, dict) and isinstance(new, dict) and any(len(f) == 3 for f in old.get("files", []))):
        return new
    root = Path(str(new["given"])).expanduser()
    return {**new, "files": [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in saved_files(str(root))]}


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, one clause per setting (``data.path=X: a.csv changed (...)``)."""
    out = []
    for key in ("data.path", "data.val_path"):
        a, b = old.get(key), new.get(key)
        if _same(a, b):
            continue
        if a is None or b is None or a["given"] != b["given"]:
            was, now = (e["given"] if e else "the built-in data" for e in (a, b))
            out.append(f"{key}: {was}, now {now}")
            continue
        out.append(f"{key}={b['given']}: " + "; ".join(_file_changes(a, b)))
    a, b = old.get("data.tokenizer"), _as_recorded(old.get("data.tokenizer"), new.get("data.tokenizer"))
    if a != b:
        was, now = (t if isinstance(t, str) or t is None else f"{t['given']}" for t in (a, b))
        out.append(f"data.tokenizer: {now}, its files changed" if was == now else f"data.tokenizer: {was}, now {now}")
    return out
