"""Hugging Face Hub names (``ORG/NAME[@REVISION]``, ``hf://ORG/NAME``, ``hf://datasets/ORG/NAME``; a path that exists
is a path) as local folders: each pinned to its commit, downloaded once (by local rank 0) into the user's Hugging Face
cache and checked whole before anything loads it; offline, a name the cache holds whole is used as it is."""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import re
import shutil
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(?P<name>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
DATASETS = "hf://datasets/"
MODELS = "hf://"
# A file a local data path names, not a repo (``data/train.jsonl`` that does not exist is a missing file).
_FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt", ".arrow", ".md", ".py", ".gz", ".zst")
# What a model folder needs of a repo, by the top-level file's suffix (subfolders such as original/ or onnx/ are
# other formats of the same weights).
_MODEL_FILES = (".json", ".txt", ".model", ".tiktoken", ".jinja", ".py")
_WEIGHTS = {"safetensors": (".safetensors",), "bin": (".bin",)}
_TABLES = (".parquet", ".jsonl", ".json", ".csv", ".txt", ".arrow", ".json.gz", ".jsonl.gz", ".csv.gz")
STALL_S = 600.0  # seconds another rank waits for local rank 0's download to make progress
TIMEOUT_S = 10.0  # seconds to connect to the Hub, and one call's answer (huggingface_hub's own default)
TRANSFER_S = 120.0  # seconds one read or write of a transfer may wait (a commit's answer can take a while)


class HubError(ValueError):
    """A name that cannot be read as asked: one paragraph, with the fix."""


@dataclass(frozen=True)
class Wanted:
    """What a setting asks of the Hub: ``kind`` is ``model``, ``adapter``, ``tokenizer`` or ``data``."""

    key: str
    given: str
    name: str
    revision: str | None
    kind: str
    config: str | None = None
    split: str | None = None
    asked_as: str | None = None  # the revision the user asked for, where revision is the commit the launch pinned
    implied: bool = False  # read through another setting (data.tokenizer naming the model's repo): pinned there

    @property
    def repo_type(self) -> str:
        return "dataset" if self.kind == "data" else "model"

    @property
    def asked(self) -> str:
        return self.asked_as or self.revision or "main"

    def at(self, revision: str) -> str:
        """The setting's value pinned to ``revision``, in the form it was given."""
        prefix = DATASETS if self.given.startswith(DATASETS) else MODELS if self.given.startswith(MODELS) else ""
        return f"{prefix}{self.name}@{revision}"


@dataclass(frozen=True)
class Pin:
    """A name resolved: its commit, the folder the setting now reads (``local``), a data set config's ``splits``."""

    wanted: Wanted
    commit: str
    local: str
    files: int
    bytes: int
    splits: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def validation_split(self) -> str | None:
        """The data set's own split that validates: the first of :data:`VALIDATION_SPLITS` it has files for."""
        return next((s for s in VALIDATION_SPLITS if self.splits.get(s)), None)

    @property
    def value(self) -> str:
        """The setting as the run records it: the name at its commit."""
        return self.wanted.at(self.commit)

    def record(self) -> dict[str, Any]:
        """What report.json says of it."""
        w = self.wanted
        out: dict[str, Any] = {"key": w.key, "name": w.name, "type": w.repo_type, "revision": w.asked,
                               "commit": self.commit, "files": self.files, "bytes": self.bytes, "pinned": self.value}
        if w.kind == "data":
            out.update(config=w.config or "default", split=w.split or "train")
        return out


def wanted(key: str, value: str | None, kind: str, config: str | None = None,
           split: str | None = None) -> Wanted | None:
    """The Hub name ``value`` gives, or None when it is a local path (one that exists wins), unset or no name."""
    if not value or Path(value).expanduser().exists():
        return None
    form = f"{DATASETS}ORG/NAME" if kind == "data" else "ORG/NAME"
    if value.startswith(MODELS) and value.startswith(DATASETS) != (kind == "data"):
        raise HubError(f"{key}={value}: {key} takes {'a data set' if kind == 'data' else 'a model repo'} of the Hub: "
                       f"{form} (@REVISION: a branch, a tag or a commit).")
    if value.startswith(MODELS):
        rest = value.removeprefix(DATASETS if kind == "data" else MODELS)
    elif value.startswith((".", "/", "~")) or (kind == "data" and value.lower().endswith(_FILE_SUFFIXES)):
        return None  # a local path that does not exist: the setting's own check names it
    else:
        rest = value
    m = _NAME.match(rest.rstrip("/"))
    if m is None:
        if value.startswith(MODELS):
            raise HubError(f"{key}={value} is not a Hub name: give {form} (@REVISION: a branch, a tag or a commit).")
        return None
    return Wanted(key, value, m["name"], m["revision"], kind, config, split)


# ---- the cache -------------------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _repo_folder(w: Wanted) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return cache_dir() / repo_folder_name(repo_id=w.name, repo_type=w.repo_type)


def cached_commit(w: Wanted) -> str | None:
    """The commit the cache has for what ``w`` asks (a commit as itself; a branch or tag by its ``refs/`` file)."""
    if w.revision and _COMMIT.match(w.revision):
        return w.revision
    ref = _repo_folder(w) / "refs" / w.asked
    with contextlib.suppress(OSError):
        commit = ref.read_text().strip()
        return commit if _COMMIT.match(commit) else None
    return None


# ---- which files a setting needs -------------------------------------------------------------------------------------

def needed(w: Wanted, listing: Mapping[str, int], readme: str | None = None) -> list[str]:
    """The files of ``listing`` that ``w`` reads; a :class:`HubError` when the repo holds none of it."""
    top = [f for f in listing if "/" not in f]
    texts = [f for f in top if f.endswith(_MODEL_FILES) and not f.endswith(".py")]  # config, tokenizer...
    where = f"{w.key}={w.given}"
    if w.kind == "data":
        return _data_files(w, listing, readme)
    if w.kind == "adapter":
        if "adapter_config.json" not in top:
            raise HubError(f"{where}: {w.name} holds no adapter (no adapter_config.json; it has "
                           f"{_some(top)}). peft.path takes an adapter peft saved (save_pretrained). A full model "
                           f"goes in model.path={w.name}.")
        return sorted(f for f in top if f.endswith((*_MODEL_FILES, ".safetensors", ".bin")))
    if w.kind == "tokenizer":
        if not any(f.startswith("tokenizer") or f in ("vocab.json", "vocab.txt", "spiece.model") for f in texts):
            raise HubError(f"{where}: {w.name} holds no tokenizer (it has {_some(top)}). Name a repo with "
                           "tokenizer.json or tokenizer.model, or data.tokenizer=bytes.")
        return sorted(texts)
    if "config.json" not in top:
        kind = "an adapter (adapter_config.json): give it as peft.path" if "adapter_config.json" in top else \
            "no model"
        raise HubError(f"{where}: {w.name} holds {kind} (no config.json; it has {_some(top)}). model.path takes a "
                       "repo transformers loads with from_pretrained (config.json and weights).")
    weights = next((found for suffixes in _WEIGHTS.values() if (found := [f for f in top if f.endswith(suffixes)])), [])
    if not weights:
        raise HubError(f"{where}: {w.name} holds no weights at its top level (no .safetensors or .bin; it has "
                       f"{_some(top)}). Name a repo with transformers' weights, or build the model from its "
                       "configuration with model.config=NAME (random weights).")
    return sorted({*texts, *weights})


def _some(files: list[str]) -> str:
    return ", ".join(sorted(files)[:8]) + (f" and {len(files) - 8} more" if len(files) > 8 else "") if files else \
        "no files"


def _glob(pattern: str) -> re.Pattern[str]:
    """A data_files pattern (``**`` crosses folders, ``*`` does not), as a regular expression."""
    out = ""
    for part in re.split(r"(\*\*/?|\*|\?)", pattern):
        out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
    return re.compile(out + "$")


def configs(readme: str | None) -> dict[str, dict[str, list[str]]]:
    """A data set card's ``configs``: each config's splits and their file patterns (datasets' own format)."""
    if not readme or not readme.startswith("---"):
        return {}
    import yaml

    try:
        meta = yaml.safe_load(readme.split("---", 2)[1]) or {}
    except yaml.YAMLError:
        return {}
    out: dict[str, dict[str, list[str]]] = {}
    for c in meta.get("configs") or []:
        if not isinstance(c, dict):
            continue
        files = c.get("data_files", "")
        splits: dict[str, list[str]] = {}
        for entry in files if isinstance(files, list) else [files]:
            if isinstance(entry, dict):
                paths = entry.get("path", [])
                splits.setdefault(str(entry.get("split", "train")), []).extend(
                    paths if isinstance(paths, list) else [paths])
            elif entry:
                splits.setdefault("train", []).append(str(entry))
        out[str(c.get("config_name", "default"))] = splits
    return out


def _chosen_config(w: Wanted, named: Mapping[str, Any]) -> str:
    if w.config is None:
        if len(named) > 1 and "default" not in named:
            raise HubError(f"data.path={w.given} has {len(named)} configs ({', '.join(named)}): choose one with "
                           f"data.config={next(iter(named))}.")
        return "default" if "default" in named else next(iter(named))
    if w.config not in named:
        close = difflib.get_close_matches(w.config, list(named), n=1)
        hint = f"Did you mean data.config={close[0]}? " if close else ""
        raise HubError(f"data.config={w.config} is not a config of {w.name}. {hint}It has: {', '.join(named)}.")
    return w.config


def _data_files(w: Wanted, listing: Mapping[str, int], readme: str | None) -> list[str]:
    named = configs(readme)
    extra = ["README.md"] if "README.md" in listing else []
    if named:
        chosen = _chosen_config(w, named)
        patterns = [_glob(p) for ps in named[chosen].values() for p in ps]
        found = [f for f in listing if any(p.match(f) for p in patterns)]
        if not found:
            raise HubError(f"data.path={w.given}: config {chosen} of {w.name} names files its repo does not hold "
                           f"({', '.join(p for ps in named[chosen].values() for p in ps)}).")
        return sorted({*extra, *found})
    if w.config not in (None, "default"):
        raise HubError(f"data.config={w.config}: {w.name} has one config, default (its card lists no configs). Drop "
                       "data.config.")
    tables = [f for f in listing if f.lower().endswith(_TABLES) and not f.startswith(".")
              and PurePosixPath(f).name not in ("dataset_infos.json", "dataset_info.json")]
    if not tables:
        raise HubError(f"data.path={w.given}: {w.name} holds no data files (.parquet, .jsonl, .json, .csv, .txt; it "
                       f"has {_some(list(listing))}).")
    return sorted({*extra, *tables})


def splits(w: Wanted, snapshot: Path) -> dict[str, tuple[str, ...]]:
    """The chosen config's splits and their files in ``snapshot``, as ``datasets`` reads them."""
    readme = snapshot / "README.md"
    named = configs(readme.read_text(errors="replace") if readme.is_file() else None)
    if named:
        out = {}
        for split, patterns in named[_chosen_config(w, named)].items():
            regexes = [_glob(p) for p in patterns]
            out[split] = tuple(sorted(str(snapshot / f) for f in _snapshot_files(snapshot)
                                      if any(r.match(f) for r in regexes)))
        return out
    from datasets.data_files import DataFilesDict, get_data_patterns

    patterns = get_data_patterns(str(snapshot))
    files = DataFilesDict.from_patterns(patterns, base_path=str(snapshot))
    return {str(split): tuple(sorted(str(f) for f in fs)) for split, fs in files.items()}


def _snapshot_files(snapshot: Path) -> list[str]:
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


# ---- verification ----------------------------------------------------------------------------------------------------

def missing(snapshot: Path, files: Mapping[str, int | None]) -> list[str]:
    """Each file of ``files`` (name -> size, None: unknown) that ``snapshot`` lacks, holds at another size or cut
    short (a safetensors file), and each shard a weights index names that is absent."""
    out = []
    for name, size in files.items():
        path = snapshot / name
        if not path.is_file():
            out.append(f"{name} (absent)")
        elif size is not None and path.stat().st_size != size:
            out.append(f"{name} ({path.stat().st_size:,} of {size:,} bytes)")
        elif name.endswith(".safetensors") and (short := _safetensors_short(path)):
            out.append(f"{name} ({short})")
    for index in [n for n in files if n.endswith(".index.json")]:
        with contextlib.suppress(OSError, ValueError):
            shards = set(json.loads((snapshot / index).read_text()).get("weight_map", {}).values())
            out += [f"{s} (a shard {index} names)" for s in sorted(shards) if not (snapshot / s).is_file()]
    return out


def _safetensors_short(path: Path) -> str | None:
    """Why a safetensors file is cut short (its header gives every tensor's end), or None."""
    try:
        with path.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error):
        return "not a safetensors file"
    end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    size = path.stat().st_size
    return None if size >= 8 + n + end else f"{size:,} of {8 + n + end:,} bytes"


# ---- fetching --------------------------------------------------------------------------------------------------------

def local_rank() -> int:
    """This process's rank on its machine (``LOCAL_RANK``, SLURM's ``SLURM_LOCALID``); 0 for a process alone."""
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def fetch(w: Wanted, stall_s: float = STALL_S) -> Pin:
    """``w`` pinned and whole in the cache: from the cache alone where it can be, else from the Hub."""
    commit = cached_commit(w)
    if commit and (offline() or w.revision == commit):
        pin = _from_cache(w, commit)
        if pin is not None:
            return pin
    if offline():
        raise HubError(_not_cached(w, "HF_HUB_OFFLINE=1 is set"))
    if local_rank() != 0:
        return _wait(w, stall_s)
    return _download(w)


def _from_cache(w: Wanted, commit: str, listing: Mapping[str, int] | None = None) -> Pin | None:
    """The pin from the cache alone, or None when the cache does not hold it whole."""
    from huggingface_hub import get_cached_repo_tree
    from huggingface_hub.errors import CachedRepoTreeNotFoundError

    snapshot = _repo_folder(w) / "snapshots" / commit
    if not snapshot.is_dir():
        return None
    if listing is None:  # the Hub's listing as huggingface_hub cached it when it downloaded
        with contextlib.suppress(CachedRepoTreeNotFoundError, OSError, ValueError):  # none: another tool filled it
            listing = {f.path: f.size for f in get_cached_repo_tree(w.name, repo_type=w.repo_type, revision=commit)}
    readme = snapshot / "README.md"
    text = readme.read_text(errors="replace") if readme.is_file() else None
    sizes: dict[str, int | None]
    if listing is not None:
        sizes = {f: listing[f] for f in needed(w, listing, text)}
    else:  # filled by another tool: what the snapshot holds (a file is linked there once whole)
        present = {f: (snapshot / f).stat().st_size for f in _snapshot_files(snapshot)}
        try:
            sizes = dict.fromkeys(needed(w, present, text))
        except HubError:  # not all there
            return None
    if missing(snapshot, sizes):
        return None
    return _pin(w, commit, snapshot, sizes)


def _pin(w: Wanted, commit: str, snapshot: Path, sizes: Mapping[str, int | None]) -> Pin:
    total = sum((snapshot / f).stat().st_size for f in sizes)
    return Pin(w, commit, str(snapshot), len(sizes), total, splits(w, snapshot) if w.kind == "data" else {})


def _not_cached(w: Wanted, why: str) -> str:
    fetch_cmd = f"hf download {w.name}{' --repo-type dataset' if w.kind == 'data' else ''} --revision {w.asked}"
    return (f"{w.key}={w.given}: {why}, and this machine's Hugging Face cache ({cache_dir()}) does not hold "
            f"{w.name} at {w.asked} whole. Fetch it where the Hub can be reached (`{fetch_cmd}`, or the same runner "
            "command without HF_HUB_OFFLINE, which downloads into the same cache), then run again. HF_HOME or "
            "HF_HUB_CACHE must name the same cache both times.")


def _wait(w: Wanted, stall_s: float) -> Pin:
    """Poll the cache until local rank 0 has the commit whole, giving up after ``stall_s`` seconds without growth."""
    folder, last, since = _repo_folder(w), -1, time.monotonic()
    while True:
        commit = cached_commit(w)
        if commit and (pin := _from_cache(w, commit)) is not None:
            return pin
        size = _folder_bytes(folder)
        if size != last:
            last, since = size, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise HubError(f"{w.key}={w.given}: local rank {local_rank()} waited {stall_s:.0f} s for local rank 0 to "
                           f"download {w.name}, and its cache folder ({folder}) did not grow. Rank 0 stopped or is "
                           "stuck: see its log, then run again (the download resumes).")
        time.sleep(0.5)


def _folder_bytes(folder: Path) -> int:
    total = 0
    for p in folder.glob("blobs/*"):
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


def _download(w: Wanted) -> Pin:
    from huggingface_hub import HfApi, get_token, hf_hub_download, snapshot_download

    try:  # the commit the revision is at on the Hub, and its files' sizes
        api = HfApi()
        info_of = api.dataset_info if w.kind == "data" else api.model_info
        info = info_of(w.name, revision=w.revision, files_metadata=True, timeout=TIMEOUT_S)
        if info.gated and get_token() is None:  # refused before any file is asked for
            raise HubError(_gated(w))
        assert info.sha, "the Hub names a commit for every revision"
        commit, listing = info.sha, {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    except HubError:
        raise
    except Exception as e:  # noqa: BLE001 - each of the Hub's answers is turned into its paragraph
        import httpx2  # huggingface_hub's HTTP client
        from huggingface_hub.errors import OfflineModeIsEnabled

        if not isinstance(e, (httpx2.ConnectError, httpx2.TimeoutException, OfflineModeIsEnabled)):
            raise HubError(_refusal(w, e)) from e
        cached = cached_commit(w)  # a Hub that cannot be reached: the cached commit, when the cache has it
        if (pin := _from_cache(w, cached) if cached else None) is None:
            raise HubError(_not_cached(w, f"the Hub ({endpoint()}) cannot be reached ({type(e).__name__})")) from e
        log.warning("hub: %s=%s: the Hub (%s) cannot be reached; the cache's commit %s of %s is used", w.key,
                    w.given, endpoint(), cached[:12] if cached else "", w.asked)
        return pin
    if (pin := _from_cache(w, commit, listing)) is not None:  # the cache has it whole: no file is asked for
        _write_ref(w, commit)
        return pin
    readme = None
    if w.kind == "data" and "README.md" in listing:
        with _hub_errors(w):
            readme = Path(hf_hub_download(w.name, "README.md", repo_type=w.repo_type, revision=commit)) \
                .read_text(errors="replace")
    files = needed(w, listing, readme)
    if w.split and (named := configs(readme)) and w.split not in (have := named[_chosen_config(w, named)]):
        raise HubError(_no_split(w, w.split, list(have)))  # the card says: before its files are fetched
    sizes = {f: listing.get(f) for f in files}
    snapshot = _repo_folder(w) / "snapshots" / commit
    todo = sum(s or 0 for f, s in sizes.items() if not (snapshot / f).is_file())
    with _hub_errors(w), _progress(w, todo), bounded_http():
        folder = Path(snapshot_download(w.name, repo_type=w.repo_type, revision=commit, allow_patterns=files,
                                        etag_timeout=TIMEOUT_S))
    if bad := missing(folder, sizes):
        raise HubError(f"{w.key}={w.given}: the download of {w.name} at {commit[:12]} ended incomplete ("
                       f"{', '.join(bad[:4])}). Run the same command again: huggingface_hub resumes it, and no run "
                       "reads a snapshot until every file is whole.")
    _write_ref(w, commit)  # last: a waiting rank takes the commit once it is whole
    return _pin(w, commit, folder, sizes)


def _write_ref(w: Wanted, commit: str) -> None:
    """The branch or tag -> commit, where huggingface_hub (and :func:`cached_commit`) look when offline."""
    if w.revision == commit:
        return
    ref = _repo_folder(w) / "refs" / w.asked
    ref.parent.mkdir(parents=True, exist_ok=True)
    if not ref.is_file() or ref.read_text() != commit:
        tmp = ref.with_name(f".{ref.name}.{os.getpid()}")
        tmp.write_text(commit)
        os.replace(tmp, ref)  # whole or not at all: a reader never sees half a commit


@contextlib.contextmanager
def _hub_errors(w: Wanted) -> Iterator[None]:
    try:
        yield
    except HubError:
        raise
    except Exception as e:  # noqa: BLE001 - the Hub's answers and a dropped transfer, as paragraphs
        raise HubError(_refusal(w, e)) from e


def _page(w: Wanted) -> str:
    return f"{endpoint()}/{'datasets/' if w.kind == 'data' else ''}{w.name}"


def _gated(w: Wanted) -> str:
    return (f"{w.key}={w.given}: {w.name} is gated: its files need a token of an account that accepted its terms. "
            f"Accept them at {_page(w)}, then give the token: export HF_TOKEN=hf_... (or `hf auth login`). Nothing "
            "was built.")


def _refusal(w: Wanted, error: Exception) -> str:
    from huggingface_hub import errors

    where = f"{w.key}={w.given}"
    page = _page(w)
    if isinstance(error, errors.GatedRepoError):
        return _gated(w)
    if isinstance(error, errors.RevisionNotFoundError):
        return (f"{where}: {w.name} has no revision {w.asked} (a branch, a tag or a commit). See its branches and "
                f"tags at {page}/tree/main, or drop @{w.asked} for its main branch.")
    if isinstance(error, errors.RepositoryNotFoundError):
        kind = "data set" if w.kind == "data" else "model"
        prefix, root = f"{w.repo_type}s--", cache_dir()  # the repos of its type this machine's cache holds
        held = [p.name[len(prefix):].replace("--", "/", 1) for p in root.iterdir() if p.name.startswith(prefix)] \
            if root.is_dir() else []
        cached = difflib.get_close_matches(w.name, sorted(held), n=3, cutoff=0.5)
        near = f" This machine's cache holds {', '.join(cached)}." if cached else ""
        local = (f" No local path {w.given} exists either (relative to {Path.cwd()})." if w.given == w.name else "")
        return (f"{where}: no {kind} {w.name} on the Hub ({endpoint()}), or it is private and no token was given "
                f"(export HF_TOKEN=hf_...).{near}{local} Check the name at {page}.")
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, errors.HfHubHTTPError) and status == 401:
        return (f"{where}: the Hub refused the token (401) for {w.name}. Give a valid one: export HF_TOKEN=hf_... "
                "(or `hf auth login`).")
    return (f"{where}: reading {w.name} from the Hub ({endpoint()}) failed: {type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}. Run again (downloads resume), or set "
            "HF_HUB_OFFLINE=1 to use the cache alone.")


@contextlib.contextmanager
def _progress(w: Wanted, total: int, every_s: float = 5.0) -> Iterator[None]:
    """A console line every ``every_s`` seconds while ``w`` downloads, and a last one."""
    # huggingface_hub's progress bars are off meanwhile (one line per file would interleave with the log).
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    folder, start = _repo_folder(w), time.monotonic()
    base = _folder_bytes(folder)
    done = threading.Event()

    def report() -> None:
        while not done.wait(every_s):
            got = _folder_bytes(folder) - base
            rate = got / max(time.monotonic() - start, 1e-9)
            left = f", {(total - got) / rate:.0f} s left" if rate > 0 and total > got else ""
            _say(f"hub: downloading {w.name}: {_mb(got)} of {_mb(total)}, {_mb(rate)}/s{left}")

    was_off = are_progress_bars_disabled()
    disable_progress_bars()
    thread = threading.Thread(target=report, daemon=True, name="hub-progress")
    if total:
        _say(f"hub: downloading {w.name} ({w.asked}) into {cache_dir()}: {_mb(total)}")
        thread.start()
    try:
        yield
    finally:
        done.set()
        if thread.is_alive():
            thread.join()
        if not was_off:
            enable_progress_bars()
    if total:
        _say(f"hub: {w.name}: {_mb(total)} in {time.monotonic() - start:.1f} s")


@contextlib.contextmanager
def bounded_http() -> Iterator[None]:
    """huggingface_hub's shared HTTP client with timeouts meanwhile (it has none; only some calls pass their own)."""
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub import get_session

    session = get_session()
    previous = session.timeout
    session.timeout = httpx2.Timeout(TRANSFER_S, connect=TIMEOUT_S, pool=TIMEOUT_S)
    try:
        yield
    finally:
        session.timeout = previous


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _say(line: str) -> None:
    """One console line (stderr: precheck runs before Lightning's or Hydra's loggers exist)."""
    import sys

    print(line, file=sys.stderr, flush=True)


def relocated(pin: Pin, key: str, **changes: Any) -> Pin:
    """``pin`` as read by another setting (``data.tokenizer`` naming the model's repo), which it implies."""
    return replace(pin, wanted=replace(pin.wanted, key=key, implied=True, **changes))


VALIDATION_SPLITS = ("validation", "valid", "val", "dev")  # datasets' own names, the first present; never test


def _no_split(w: Wanted, split: str, have: list[str]) -> str:
    key = "data.val_split" if w.key.endswith("val_path") else "data.split"
    close = difflib.get_close_matches(split, have, n=1)
    hint = f"Did you mean {key}={close[0]}? " if close else ""
    return (f"{key}={split}: {w.name} (config {w.config or 'default'}) has no split {split}. {hint}Its splits: "
            f"{', '.join(have) or 'none'}.")


def split_path(pin: Pin, split: str) -> str:
    """What data.path reads for ``split`` of a pinned data set: its one file, or a folder of links to its files."""
    w = pin.wanted
    files = [f for f in pin.splits.get(split, ()) if f.lower().endswith(_TABLES)]
    if not files:
        raise HubError(_no_split(w, split, [s for s, fs in pin.splits.items() if fs]))
    if len(files) == 1:
        return files[0]
    repo = f"{w.name.replace('/', '--')}--{pin.commit}"
    cache = os.environ.get("RUNNER_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / \
        "runner"
    root = Path(cache).expanduser() / "hub-splits" / repo / (w.config or "default") / split
    if (root / ".complete").is_file():
        return str(root)
    tmp = root.with_name(f".{root.name}.{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for i, f in enumerate(files):
        (tmp / f"{i:05d}-{Path(f).name}").symlink_to(f)
    (tmp / ".complete").write_text("")
    try:
        os.replace(tmp, root)
    except OSError:  # another process made it first: theirs links the same files
        shutil.rmtree(tmp, ignore_errors=True)
    return str(root)
