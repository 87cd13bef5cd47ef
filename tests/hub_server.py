"""A loopback Hugging Face Hub for the tests: the Hub's HTTP API as ``huggingface_hub`` 2.x, ``transformers``,
``peft`` and ``datasets`` use it, served on 127.0.0.1 (an ephemeral port) from a daemon thread, stdlib only.

The real clients talk to it over a real socket (``HF_ENDPOINT=hub.endpoint``, or ``endpoint=`` where a client
takes one): repo info, refs, tree listings (paginated), paths-info, commits, ``HEAD``/``GET`` of
``/resolve/`` with the headers the clients check (``X-Repo-Commit``, a git-style ``ETag`` for small files, the
LFS sha256 in ``X-Linked-Etag``/``X-Linked-Size`` for the files the Hub keeps in LFS, ``Content-Length``, ranges),
the Hub's errors (``X-Error-Code``: ``RepoNotFound``, ``GatedRepo``, ``RevisionNotFound``, ``EntryNotFound``),
and uploads (``/api/repos/create``, ``preupload`` answering ``regular`` for every file, the NDJSON ``commit``).
No Xet headers are ever sent, so the clients use plain HTTP. Commits, trees and blobs are git objects, hashed as
git hashes them, so the clients' caches (``snapshots/<commit>``, ``refs/<branch>``, ``blobs/<etag>``) come out as
they do against the Hub.

    with LoopbackHub(tmp_path / "hub", token="hf_test") as hub:
        sha = hub.add_commit("org/model", {"config.json": b"{}"})
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf")}

``docs/testing.md`` ("A loopback Hugging Face Hub") says how a test uses it.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

REPO_TYPES = ("model", "dataset")
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.onnx", "*.gguf",
                "*.parquet", "*.arrow", "*.npy", "*.npz", "*.pkl", "*.pickle", "*.tar", "*.zip", "*.gz", "*.zst",
                "*.tflite", "*.ot", "*.model", "*tfevents*")
"""What the Hub's default ``.gitattributes`` keeps in LFS (and any file of ``lfs_threshold`` bytes or more)."""
LFS_THRESHOLD = 10 * 1024 * 1024
GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in LFS_PATTERNS).encode()
USER = "loopback"


def git_blob_oid(content: bytes) -> str:
    """The git object id of a blob, as ``git hash-object`` (and ``huggingface_hub.utils.sha.git_hash``) give it."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass(frozen=True)
class Blob:
    """One file of a commit: its size, sha256 (where the bytes are stored), git blob id (of the pointer file
    for LFS files, as on the Hub) and, for LFS files, the pointer's size."""

    size: int
    sha256: str
    oid: str
    content_oid: str
    lfs: bool
    pointer_size: int = 0

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid


@dataclass
class Commit:
    """A commit: every file of its tree, and ``changed``, the paths its operations named (added, replaced or
    deleted: what a client sent in it)."""

    sha: str
    parent: str | None
    files: dict[str, Blob]
    message: str
    description: str
    timestamp: float
    tree: str
    changed: list[str] = field(default_factory=list)


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool = False
    gated: bool | str = False
    granted: set[str] | None = None
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    @property
    def url_prefix(self) -> str:
        return "" if self.repo_type == "model" else f"{self.repo_type}s/"

    def resolve(self, revision: str) -> str | None:
        """A branch, a tag (either as ``refs/heads/...``/``refs/tags/...`` too) or a full commit id."""
        for prefix, refs in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if revision.startswith(prefix) and revision[len(prefix):] in refs:
                return refs[revision[len(prefix):]]
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        if re.fullmatch(r"[0-9a-f]{40}", revision) and revision in self.commits:
            return revision
        return None

    def history(self, sha: str) -> Iterator[Commit]:
        commit: Commit | None = self.commits[sha]
        while commit is not None:
            yield commit
            commit = self.commits[commit.parent] if commit.parent else None


@dataclass
class Fault:
    """What the Hub does to one file's ``/resolve/`` responses (see :meth:`LoopbackHub.fault`). ``started`` is
    set when a response body begins, ``served`` counts the responses the fault applied to."""

    repo_type: str
    repo_id: str
    path: str
    methods: tuple[str, ...]
    status: int | None = None
    truncate_at: int | None = None
    delay_s: float = 0.0
    bytes_per_s: float | None = None
    times: int | None = None
    served: int = 0
    started: threading.Event = field(default_factory=threading.Event)

    def applies(self, repo_type: str, repo_id: str, path: str, method: str) -> bool:
        return (self.repo_type == repo_type and self.repo_id == repo_id and fnmatch.fnmatchcase(path, self.path)
                and method in self.methods and (self.times is None or self.served < self.times))


@dataclass
class Served:
    """One request the Hub answered: its method, path (as sent, quoted), query, headers (lower-case names) and
    status."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    status: int | None = None


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, dict(headers or {})


class LoopbackHub:
    """A Hugging Face Hub on 127.0.0.1: model and dataset repos with branches, tags and commits, served to the
    real clients. ``token`` (one or several) are the valid tokens; a request without one reads public repos
    only, like an anonymous client of the Hub. Files are kept under ``root`` (by sha256).

    ``tree_page_size`` is the tree listing's page (the Hub's is 1,000; the clients follow its ``Link`` header).
    ``requests`` lists the ``(method, path)`` of every request served (``log``: the same with query, headers and
    status); ``unhandled`` those it had no endpoint for (answered 404), which a test can assert empty."""

    def __init__(self, root: Path | str, token: str | Iterable[str] = "hf_test", *, host: str = "127.0.0.1",
                 port: int = 0, tree_page_size: int = 1000, lfs_patterns: Iterable[str] = LFS_PATTERNS,
                 lfs_threshold: int = LFS_THRESHOLD) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.tokens = {token} if isinstance(token, str) else set(token)
        self.host, self.port = host, port
        self.tree_page_size = tree_page_size
        self.lfs_patterns = tuple(lfs_patterns)
        self.lfs_threshold = lfs_threshold
        self.repos: dict[tuple[str, str], Repo] = {}
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self.log: list[Served] = []
        self.unhandled: list[tuple[str, str]] = []
        self._lock = threading.RLock()
        self._clock = 0.0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------- lifecycle

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: what ``HF_ENDPOINT`` (or a client's ``endpoint=``) is set to."""
        if not self.port:
            raise RuntimeError("the loopback Hub has not started yet (start() or use it as a context manager)")
        return f"http://{self.host}:{self.port}"

    def start(self) -> LoopbackHub:
        """Listen (on the port it had before, after a stop(), so a client's endpoint stays right)."""
        if self._server is not None:
            return self
        server = _Server((self.host, self.port), _Handler)
        server.hub = self
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="loopback-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and drop every open connection (kept-alive ones and transfers under way), so that a
        client sees the Hub gone (connection refused) from the next request on."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stopping = True
        server.shutdown()
        server.server_close()
        for sock in list(server.connections):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> LoopbackHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------------------------------- test's side

    def create_repo(self, repo_id: str, repo_type: str = "model", *, private: bool = False,
                    gated: bool | str = False, initial_commit: bool = False) -> Repo:
        """A repo (or the one already there). ``initial_commit``: a first commit with the Hub's default
        ``.gitattributes``, as ``POST /api/repos/create`` makes; without it ``main`` appears with the first
        :meth:`add_commit`."""
        if repo_type not in REPO_TYPES:
            raise ValueError(f"repo_type must be one of {REPO_TYPES}, not {repo_type!r}")
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise ValueError(f"repo_id must be 'namespace/name', not {repo_id!r}")
        with self._lock:
            repo = self.repos.get((repo_type, repo_id))
            if repo is None:
                repo = self.repos[(repo_type, repo_id)] = Repo(repo_type, repo_id, private,
                                                               "auto" if gated is True else gated)
                if initial_commit:
                    self.add_commit(repo_id, {".gitattributes": GITATTRIBUTES}, repo_type=repo_type,
                                    message="initial commit")
            return repo

    def repo(self, repo_id: str, repo_type: str = "model") -> Repo:
        try:
            return self.repos[(repo_type, repo_id)]
        except KeyError:
            raise KeyError(f"no {repo_type} repo {repo_id!r} on the loopback Hub") from None

    def add_commit(self, repo_id: str, files: Mapping[str, bytes | str | Path | None], *, repo_type: str = "model",
                   branch: str = "main", message: str = "Upload files", description: str = "",
                   parent: str | None = None) -> str:
        """Commit ``files`` (path in repo -> content: bytes, text, or a local file's Path; ``None`` deletes the
        path, or every file under it if it is a folder) on ``branch`` and return the commit's 40-hex id. The
        files of the branch's previous commit (or of ``parent``) carry over, as in git; a new branch starts
        from ``parent`` (default: nothing). The repo is created (public) if it does not exist."""
        with self._lock:
            repo = self.create_repo(repo_id, repo_type)
            base_sha = parent if parent is not None else repo.branches.get(branch)
            if base_sha is not None and base_sha not in repo.commits:
                raise ValueError(f"{parent!r} is not a commit of {repo_id}")
            tree = dict(repo.commits[base_sha].files) if base_sha else {}
            changed = []
            for path, content in files.items():
                path = _clean_path(path)
                changed.append(path)
                if content is None:
                    removed = [p for p in tree if p == path or p.startswith(path + "/")]
                    if not removed:
                        raise KeyError(f"{path!r} is not in {repo_id}@{branch}")
                    for p in removed:
                        del tree[p]
                    continue
                data = content.read_bytes() if isinstance(content, Path) else \
                    content.encode() if isinstance(content, str) else bytes(content)
                tree[path] = self._store(path, data)
            return self._commit(repo, branch, base_sha, tree, message, description, changed)

    def add_folder(self, repo_id: str, folder: Path | str, *, repo_type: str = "model", branch: str = "main",
                   message: str = "Upload folder", path_in_repo: str = "") -> str:
        """Every file under ``folder`` (``.git`` and ``.cache`` left out), in one commit."""
        folder = Path(folder)
        files: dict[str, bytes | str | Path | None] = {}
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if path.is_file() and not {".git", ".cache"} & set(rel.parts):
                files["/".join(filter(None, (path_in_repo.strip("/"), rel.as_posix())))] = path
        return self.add_commit(repo_id, files, repo_type=repo_type, branch=branch, message=message)

    def tag(self, repo_id: str, tag: str, revision: str = "main", *, repo_type: str = "model") -> str:
        """Tag ``revision`` (a branch, tag or commit); returns the commit tagged."""
        with self._lock:
            repo = self.repo(repo_id, repo_type)
            sha = repo.resolve(revision)
            if sha is None:
                raise KeyError(f"{revision!r} is not a revision of {repo_id}")
            repo.tags[tag] = sha
            return sha

    def branch(self, repo_id: str, branch: str, revision: str = "main", *, repo_type: str = "model") -> str:
        """Make (or move) ``branch`` to ``revision``; returns its commit."""
        with self._lock:
            repo = self.repo(repo_id, repo_type)
            sha = repo.resolve(revision)
            if sha is None:
                raise KeyError(f"{revision!r} is not a revision of {repo_id}")
            repo.branches[branch] = sha
            return sha

    def set_gated(self, repo_id: str, gated: bool | str = True, *, repo_type: str = "model",
                  granted: Iterable[str] | None = None) -> None:
        """Gate the repo (``True`` shows as ``"auto"``, or pass ``"manual"``): its files need a valid token,
        and one of ``granted`` if given (another valid token gets 403 GatedRepo, as a user not granted access)."""
        repo = self.repo(repo_id, repo_type)
        repo.gated = "auto" if gated is True else gated
        repo.granted = set(granted) if granted is not None else None

    def set_private(self, repo_id: str, private: bool = True, *, repo_type: str = "model") -> None:
        self.repo(repo_id, repo_type).private = private

    def fault(self, repo_id: str, path: str = "*", *, repo_type: str = "model", status: int | None = None,
              truncate_at: int | None = None, delay_s: float = 0.0, bytes_per_s: float | None = None,
              times: int | None = None, methods: Iterable[str] = ("GET",)) -> Fault:
        """Misbehave on a file's ``/resolve/`` responses (``path`` may be a glob) for ``methods``, ``times``
        times (``None``: until :meth:`clear_faults`): wait ``delay_s`` before answering; answer ``status``
        (an error with no ``X-Error-Code``, as a Hub that is down); send the body at ``bytes_per_s`` (so a test
        can stop a download midway: ``fault.started`` is set when the body begins); or close the connection
        after ``truncate_at`` bytes of the body (Content-Length announced in full), which the clients see as a
        dropped connection and resume with a ``Range`` request."""
        fault = Fault(repo_type, repo_id, path, tuple(m.upper() for m in methods), status, truncate_at, delay_s,
                      bytes_per_s, times)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def clear_requests(self) -> None:
        self.requests.clear()
        self.log.clear()
        self.unhandled.clear()

    def read(self, repo_id: str, path: str, revision: str = "main", *, repo_type: str = "model") -> bytes:
        """A file's bytes at ``revision`` (to check what an upload committed)."""
        repo = self.repo(repo_id, repo_type)
        sha = repo.resolve(revision)
        if sha is None:
            raise KeyError(f"{revision!r} is not a revision of {repo_id}")
        return (self.objects / repo.commits[sha].files[path].sha256).read_bytes()

    def files(self, repo_id: str, revision: str = "main", *, repo_type: str = "model") -> list[str]:
        repo = self.repo(repo_id, repo_type)
        sha = repo.resolve(revision)
        if sha is None:
            raise KeyError(f"{revision!r} is not a revision of {repo_id}")
        return sorted(repo.commits[sha].files)

    # --------------------------------------------------------------------------------------------- storage

    def _is_lfs(self, path: str, size: int) -> bool:
        name = path.rsplit("/", 1)[-1]
        return size >= self.lfs_threshold or any(fnmatch.fnmatchcase(name, p) for p in self.lfs_patterns)

    def _store(self, path: str, data: bytes) -> Blob:
        sha256 = hashlib.sha256(data).hexdigest()
        target = self.objects / sha256
        if not target.exists():
            tmp = target.with_suffix(f".{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
        content_oid = git_blob_oid(data)
        if self._is_lfs(path, len(data)) and data:
            pointer = lfs_pointer(sha256, len(data))
            return Blob(len(data), sha256, git_blob_oid(pointer), content_oid, True, len(pointer))
        return Blob(len(data), sha256, content_oid, content_oid, False)

    def _commit(self, repo: Repo, branch: str, parent: str | None, files: dict[str, Blob], message: str,
                description: str, changed: list[str]) -> str:
        with self._lock:
            self._clock = max(time.time(), self._clock + 1)
            ts = self._clock
            tree = _tree_oid(files)
            author = f"{USER} <{USER}@loopback.hub> {int(ts)} +0000"
            body = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "") + \
                f"author {author}\ncommitter {author}\n\n{message}\n" + (f"\n{description}\n" if description else "")
            raw = body.encode()
            sha = hashlib.sha1(b"commit %d\0" % len(raw) + raw).hexdigest()
            repo.commits[sha] = Commit(sha, parent, files, message, description, ts, tree, changed)
            repo.branches[branch] = sha
            return sha

    # ----------------------------------------------------------------------------------------------- serving

    def _authorized(self, repo: Repo | None, token: str | None, *, write: bool = False) -> Repo:
        """The repo if this request may see it; else the Hub's answer (RepoNotFound, 401 without a token)."""
        if repo is None or ((repo.private or write) and token is None):
            raise HubError(401 if token is None else 404, "Repository not found", "RepoNotFound")
        return repo

    def _gate(self, repo: Repo, token: str | None) -> None:
        if not repo.gated:
            return
        kind = "model" if repo.repo_type == "model" else repo.repo_type
        if token is None:
            raise HubError(401, f"Access to {kind} {repo.repo_id} is restricted. You must have access to it and be "
                           "authenticated to access it. Please log in.", "GatedRepo")
        if repo.granted is not None and token not in repo.granted:
            raise HubError(403, f"Access to {kind} {repo.repo_id} is restricted and you are not in the authorized "
                           "list. Visit its page to ask for access.", "GatedRepo")

    def _revision(self, repo: Repo, revision: str) -> Commit:
        sha = repo.resolve(revision)
        if sha is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[sha]

    def _entry(self, repo: Repo, commit: Commit, path: str, *, expand: bool) -> dict[str, Any] | None:
        """A tree/paths-info entry for a file or folder of ``commit`` (None if neither)."""
        blob = commit.files.get(path)
        if blob is not None:
            entry: dict[str, Any] = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
            if blob.lfs:
                entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
            if expand:
                entry["lastCommit"] = self._last_commit(repo, commit, path)
                entry["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None},
                                               "pickleImportScan": None}
            return entry
        prefix = path + "/"
        below = {p[len(prefix):]: b for p, b in commit.files.items() if p.startswith(prefix)}
        if not below:
            return None
        entry = {"type": "directory", "oid": _tree_oid(below), "size": 0, "path": path}
        if expand:
            entry["lastCommit"] = self._last_commit(repo, commit, path)
        return entry

    def _last_commit(self, repo: Repo, commit: Commit, path: str) -> dict[str, str]:
        def state(c: Commit) -> Any:
            return c.files.get(path) or {p: b for p, b in c.files.items() if p.startswith(path + "/")}

        last = commit
        for older in repo.history(commit.sha):
            if state(older) != state(commit):
                break
            last = older
        return {"id": last.sha, "title": last.message, "date": _iso(last.timestamp)}

    def _repo_info(self, repo: Repo, commit: Commit | None, params: dict[str, list[str]]) -> dict[str, Any]:
        blobs = params.get("blobs", [""])[-1].lower() in ("1", "true")
        siblings = []
        for path, blob in sorted(commit.files.items()) if commit else ():
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=blob.size, blobId=blob.oid)
                if blob.lfs:
                    sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
            siblings.append(sibling)
        info: dict[str, Any] = {
            "_id": hashlib.sha1(f"{repo.repo_type}/{repo.repo_id}".encode()).hexdigest()[:24],
            "id": repo.repo_id, "author": repo.repo_id.split("/")[0], "sha": commit.sha if commit else None,
            "lastModified": _iso(commit.timestamp if commit else repo.created), "createdAt": _iso(repo.created),
            "private": repo.private, "gated": repo.gated, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "siblings": siblings,
            "usedStorage": sum(b.size for b in commit.files.values()) if commit else 0,
        }
        if repo.repo_type == "model":
            info.update(modelId=repo.repo_id, spaces=[])
        card = self._card_data(commit) if commit else None
        if card is not None:
            info["cardData"] = card
            if repo.repo_type == "model" and isinstance(card.get("library_name"), str):
                info["library_name"] = card["library_name"]
            info["tags"] = [t for t in card.get("tags") or [] if isinstance(t, str)]
        expand = [v for key in ("expand", "expand[]") for v in params.get(key, [])]
        if expand:
            info = {k: v for k, v in info.items() if k in ("_id", "id") or k in expand}
        return info

    def _card_data(self, commit: Commit) -> dict[str, Any] | None:
        blob = commit.files.get("README.md")
        if blob is None:
            return None
        text = (self.objects / blob.sha256).read_text(errors="replace")
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.S)
        if not match:
            return None
        try:
            import yaml
        except ImportError:
            return None
        try:
            data = yaml.safe_load(match.group(1))
        except yaml.YAMLError:
            return None
        return data if isinstance(data, dict) else None


def _clean_path(path: str) -> str:
    path = path.replace("\\", "/").strip("/")
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"not a path in a repo: {path!r}")
    return path


def _tree_oid(files: Mapping[str, Blob]) -> str:
    """The git tree id of ``files`` (paths relative to the tree), folders as subtrees, in git's order."""
    here: dict[str, Blob] = {}
    below: dict[str, dict[str, Blob]] = {}
    for path, blob in files.items():
        head, sep, rest = path.partition("/")
        if sep:
            below.setdefault(head, {})[rest] = blob
        else:
            here[head] = blob
    entries = [(name, b"100644", bytes.fromhex(blob.oid)) for name, blob in here.items()]
    entries += [(name, b"40000", bytes.fromhex(_tree_oid(sub))) for name, sub in below.items()]
    entries.sort(key=lambda e: e[0] + ("/" if e[1] == b"40000" else ""))
    raw = b"".join(mode + b" " + name.encode() + b"\0" + oid for name, mode, oid in entries)
    return hashlib.sha1(b"tree %d\0" % len(raw) + raw).hexdigest()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    hub: LoopbackHub
    stopping = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.connections: set[socket.socket] = set()
        super().__init__(*args, **kwargs)


class _Dropped(Exception):
    """The connection is to be closed without a (complete) answer."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "LoopbackHub/1.0"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.connections.add(self.connection)

    def finish(self) -> None:
        self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        pass

    def send_response(self, code: int, message: str | None = None) -> None:
        if getattr(self, "record", None) is not None:
            self.record.status = code
        super().send_response(code, message)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # --------------------------------------------------------------------------------------------- plumbing

    @property
    def hub(self) -> LoopbackHub:
        return self.server.hub

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        self.hub.requests.append((method, url.path))
        self.record = Served(method, url.path, url.query, {k.lower(): v for k, v in self.headers.items()})
        self.hub.log.append(self.record)
        self.params = parse_qs(url.query, keep_blank_values=True)
        self.body = self._read_body()
        try:
            self.token = self._token()
            if not self._route(method, [unquote(s) for s in url.path.split("/")[1:]], url.path):
                self.hub.unhandled.append((method, url.path))
                raise HubError(404, f"the loopback Hub does not serve {method} {url.path}")
        except HubError as err:
            self._error(err)
        except _Dropped:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization")
        if not auth:
            return None
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or token.strip() not in self.hub.tokens:
            raise HubError(401, "Invalid credentials in Authorization header")
        return token.strip()

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json",
              headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Request-Id", f"Root=loopback-{len(self.hub.requests)}")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> bool:
        self._send(status, json.dumps(data).encode(), headers=headers)
        return True

    def _error(self, err: HubError) -> None:
        headers = dict(err.headers)
        if err.code:
            headers["X-Error-Code"] = err.code
        headers["X-Error-Message"] = err.message
        self._send(err.status, json.dumps({"error": err.message}).encode(), headers=headers)

    def _repo(self, repo_type: str, repo_id: str, *, write: bool = False) -> Repo:
        with self.hub._lock:
            repo = self.hub.repos.get((repo_type, repo_id))
        return self.hub._authorized(repo, self.token, write=write)

    # ----------------------------------------------------------------------------------------------- routes

    def _route(self, method: str, parts: list[str], raw_path: str) -> bool:
        if parts[:1] == ["api"]:
            return self._api(method, parts[1:], raw_path)
        # /{repo}/resolve/{rev}/{path} and /datasets/{repo}/resolve/{rev}/{path}
        repo_type = "model"
        if parts[:1] == ["datasets"] and len(parts) > 4 and parts[3] == "resolve":
            repo_type, parts = "dataset", parts[1:]
        if len(parts) >= 5 and parts[2] == "resolve" and method in ("GET", "HEAD"):
            raw = raw_path.split("/")
            offset = 1 if repo_type == "model" else 2
            revision = unquote(raw[offset + 3])
            path = unquote("/".join(raw[offset + 4:]))
            self._resolve(method, repo_type, f"{parts[0]}/{parts[1]}", revision, path)
            return True
        return False

    def _api(self, method: str, parts: list[str], raw_path: str) -> bool:
        if parts == ["agent-harnesses"] and method == "GET":
            # huggingface_hub fetches the registry of AI agents (to tell one in its output) once a day
            return self._json({"standardEnvVars": [], "harnesses": {}})
        if parts == ["whoami-v2"] and method == "GET":
            if self.token is None:
                raise HubError(401, "Invalid username or password.")
            return self._json({"type": "user", "id": "0" * 24, "name": USER, "fullname": "Loopback Hub user",
                               "email": None, "emailVerified": False, "canPay": False, "isPro": False,
                               "periodEnd": None, "avatarUrl": "", "orgs": [],
                               "auth": {"type": "access_token",
                                        "accessToken": {"displayName": "loopback", "role": "write",
                                                        "createdAt": _iso(0)}}})
        if parts == ["validate-yaml"] and method == "POST":
            # what huggingface_hub asks before it commits a README.md (upload_folder, create_commit)
            return self._validate_yaml()
        if parts[:1] == ["repos"] and method in ("POST", "DELETE") and len(parts) == 2:
            return self._repos(parts[1])
        if len(parts) < 3 or parts[0] not in ("models", "datasets"):
            return False
        repo_type, repo_id, rest = parts[0][:-1], f"{parts[1]}/{parts[2]}", parts[3:]
        # the revision (and a path after it) as sent, quoted: a branch may hold a "/" (%2F)
        raw_rest = raw_path.split("/")[5:]
        if not rest and method == "GET":
            return self._info(repo_type, repo_id, None)
        verb = rest[0] if rest else ""
        if verb == "revision" and len(raw_rest) >= 2 and method == "GET":
            return self._info(repo_type, repo_id, unquote("/".join(raw_rest[1:])))
        if verb == "refs" and method == "GET":
            return self._refs(repo_type, repo_id)
        if verb == "tree" and len(raw_rest) >= 2 and method == "GET":
            path = unquote("/".join(raw_rest[2:]))
            return self._tree(repo_type, repo_id, unquote(raw_rest[1]), path, raw_path)
        if verb == "paths-info" and len(raw_rest) >= 2 and method == "POST":
            return self._paths_info(repo_type, repo_id, unquote("/".join(raw_rest[1:])))
        if verb == "commits" and len(raw_rest) >= 2 and method == "GET":
            return self._commits(repo_type, repo_id, unquote("/".join(raw_rest[1:])))
        if verb == "preupload" and len(raw_rest) >= 2 and method == "POST":
            return self._preupload(repo_type, repo_id, unquote("/".join(raw_rest[1:])))
        if verb == "commit" and len(raw_rest) >= 2 and method == "POST":
            return self._commit(repo_type, repo_id, unquote("/".join(raw_rest[1:])))
        if verb == "branch" and len(raw_rest) >= 2 and method in ("POST", "DELETE"):
            return self._branch(method, repo_type, repo_id, unquote("/".join(raw_rest[1:])))
        if verb == "tag" and len(raw_rest) >= 2 and method in ("POST", "DELETE"):
            return self._tag(method, repo_type, repo_id, unquote("/".join(raw_rest[1:])))
        if verb == "settings" and method == "PUT":
            return self._settings(repo_type, repo_id)
        return False

    def _info(self, repo_type: str, repo_id: str, revision: str | None) -> bool:
        repo = self._repo(repo_type, repo_id)
        with self.hub._lock:
            if revision is None:
                sha = repo.branches.get("main")
                commit = repo.commits[sha] if sha else None
            else:
                commit = self.hub._revision(repo, revision)
            return self._json(self.hub._repo_info(repo, commit, self.params))

    def _refs(self, repo_type: str, repo_id: str) -> bool:
        repo = self._repo(repo_type, repo_id)

        def refs(kind: str, names: dict[str, str]) -> list[dict[str, str]]:
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": s} for n, s in sorted(names.items())]

        data: dict[str, Any] = {"branches": refs("heads", repo.branches), "converts": [],
                                "tags": refs("tags", repo.tags)}
        if self.params.get("include_prs"):
            data["pullRequests"] = []
        return self._json(data)

    def _tree(self, repo_type: str, repo_id: str, revision: str, path: str, raw_path: str) -> bool:
        repo = self._repo(repo_type, repo_id)
        commit = self.hub._revision(repo, revision)
        recursive = self.params.get("recursive", ["false"])[-1].lower() in ("1", "true")
        expand = self.params.get("expand", ["false"])[-1].lower() in ("1", "true")
        path = path.strip("/")
        prefix = path + "/" if path else ""
        if path and path in commit.files:
            raise HubError(404, f"{path} is a file, not a folder", "EntryNotFound",
                           {"X-Repo-Commit": commit.sha})
        listed: set[str] = set()
        for file in commit.files:
            if not file.startswith(prefix):
                continue
            parts = file[len(prefix):].split("/")
            depth = len(parts) if recursive else 1
            for i in range(1, min(depth, len(parts)) + 1):
                listed.add(prefix + "/".join(parts[:i]))
        if path and not listed:
            raise HubError(404, f"{path} does not exist on \"{revision}\"", "EntryNotFound",
                           {"X-Repo-Commit": commit.sha})
        names = sorted(listed)
        page = max(1, min(self.hub.tree_page_size, 50 if expand else self.hub.tree_page_size))
        start = int(base64.urlsafe_b64decode(self.params["cursor"][-1]).decode()) if "cursor" in self.params else 0
        entries = [self.hub._entry(repo, commit, n, expand=expand) for n in names[start:start + page]]
        headers = {}
        if start + page < len(names):
            cursor = base64.urlsafe_b64encode(str(start + page).encode()).decode()
            query = f"recursive={str(recursive).lower()}&expand={str(expand).lower()}&cursor={quote(cursor)}"
            headers["Link"] = f'<{self.hub.endpoint}{raw_path}?{query}>; rel="next"'
        return self._json(entries, headers=headers)

    def _paths_info(self, repo_type: str, repo_id: str, revision: str) -> bool:
        repo = self._repo(repo_type, repo_id)
        commit = self.hub._revision(repo, revision)
        if self.headers.get("Content-Type", "").startswith("application/json"):
            form = json.loads(self.body or b"{}")
            paths, expand = form.get("paths", []), bool(form.get("expand"))
        else:
            form = parse_qs(self.body.decode(), keep_blank_values=True)
            paths, expand = form.get("paths", []), form.get("expand", ["false"])[-1].lower() in ("1", "true")
        entries = [self.hub._entry(repo, commit, p.strip("/"), expand=expand) for p in paths if p.strip("/")]
        return self._json([e for e in entries if e is not None])

    def _commits(self, repo_type: str, repo_id: str, revision: str) -> bool:
        repo = self._repo(repo_type, repo_id)
        commit = self.hub._revision(repo, revision)
        return self._json([{"id": c.sha, "title": c.message, "message": c.description,
                            "authors": [{"user": USER, "avatar": ""}], "date": _iso(c.timestamp)}
                           for c in repo.history(commit.sha)])

    def _repos(self, action: str) -> bool:
        if self.token is None:
            raise HubError(401, "You must be authenticated to do this.")
        payload = json.loads(self.body or b"{}")
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload.get('organization') or USER}/{payload['name']}"
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"the loopback Hub serves {' and '.join(REPO_TYPES)} repos, not {repo_type}")
        url = f"{self.hub.endpoint}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"
        with self.hub._lock:
            exists = (repo_type, repo_id) in self.hub.repos
            if action == "delete":
                if not exists:
                    raise HubError(404, "Repository not found", "RepoNotFound")
                del self.hub.repos[(repo_type, repo_id)]
                return self._json({})
            if action != "create":
                raise HubError(404, f"the loopback Hub does not serve /api/repos/{action}")
            if exists:
                return self._json({"error": f"You already created this {repo_type} repo", "url": url}, 409)
            private = payload.get("visibility") == "private" if "visibility" in payload else \
                bool(payload.get("private"))
            self.hub.create_repo(repo_id, repo_type, private=private, initial_commit=True)
        return self._json({"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self) -> bool:
        """A card's metadata (its YAML front matter), as the Hub checks it: YAML whose top level is a mapping; a
        card without metadata passes."""
        payload = json.loads(self.body or b"{}")
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", str(payload.get("content", "")), re.S)
        if match:
            import yaml

            try:
                data = yaml.safe_load(match.group(1))
            except yaml.YAMLError as e:
                return self._json({"errors": [{"message": f"Invalid YAML in the metadata: {e}"}]}, 400)
            if data is not None and not isinstance(data, dict):
                return self._json({"errors": [{"message": "The metadata must be a YAML mapping"}]}, 400)
        return self._json({"errors": [], "warnings": []})

    def _preupload(self, repo_type: str, repo_id: str, revision: str) -> bool:
        repo = self._repo(repo_type, repo_id, write=True)
        commit = self.hub._revision(repo, revision)
        payload = json.loads(self.body or b"{}")
        files = []
        for file in payload.get("files", []):
            existing = commit.files.get(file["path"])
            entry = {"path": file["path"], "uploadMode": "regular", "shouldIgnore": False}
            if existing is not None:
                entry["oid"] = existing.content_oid
            files.append(entry)
        return self._json({"files": files, "commitOid": commit.sha})

    def _commit(self, repo_type: str, repo_id: str, revision: str) -> bool:
        repo = self._repo(repo_type, repo_id, write=True)
        if self.params.get("create_pr", ["0"])[-1] in ("1", "true"):
            raise HubError(400, "the loopback Hub does not make pull requests")
        lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "The commit's first line must be its header")
        header = lines[0]["value"]
        with self.hub._lock:
            if revision not in repo.branches:
                raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            head = repo.branches[revision]
            if header.get("parentCommit") and header["parentCommit"] != head:
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(repo.commits[head].files)
            changed = []
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                path = _clean_path(value.get("path", ""))
                changed.append(path)
                if key == "file":
                    content = value.get("content", "")
                    data = base64.b64decode(content) if value.get("encoding") == "base64" else content.encode()
                    files[path] = self.hub._store(path, data)
                elif key == "lfsFile":
                    stored = self.hub.objects / value.get("oid", "")
                    if not re.fullmatch(r"[0-9a-f]{64}", value.get("oid", "")) or not stored.exists():
                        raise HubError(400, f"Your push was rejected because an LFS pointer ({path}) points to a "
                                       "file that does not exist")
                    files[path] = self.hub._store(path, stored.read_bytes())
                elif key == "deletedFile":
                    if files.pop(path, None) is None:
                        raise HubError(404, f"File not found: {path}", "EntryNotFound")
                elif key == "deletedFolder":
                    for p in [p for p in files if p.startswith(path + "/")]:
                        del files[p]
                else:
                    raise HubError(400, f"the loopback Hub does not take commit operations of key {key!r}")
            sha = self.hub._commit(repo, revision, head, files, header.get("summary") or "Upload",
                                   header.get("description") or "", changed)
        url = f"{self.hub.endpoint}/{repo.url_prefix}{repo_id}/commit/{sha}"
        return self._json({"success": True, "commitOid": sha, "commitUrl": url, "hookOutput": ""})

    def _branch(self, method: str, repo_type: str, repo_id: str, branch: str) -> bool:
        repo = self._repo(repo_type, repo_id, write=True)
        with self.hub._lock:
            if method == "DELETE":
                if repo.branches.pop(branch, None) is None:
                    raise HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
                return self._json({})
            payload = json.loads(self.body or b"{}")
            if branch in repo.branches:
                raise HubError(409, f"Reference already exists: refs/heads/{branch}")
            start = payload.get("startingPoint") or "main"
            repo.branches[branch] = self.hub._revision(repo, start).sha
        return self._json({})

    def _tag(self, method: str, repo_type: str, repo_id: str, name: str) -> bool:
        repo = self._repo(repo_type, repo_id, write=True)
        with self.hub._lock:
            if method == "DELETE":
                if repo.tags.pop(name, None) is None:
                    raise HubError(404, f"Invalid rev id: {name}", "RevisionNotFound")
                return self._json({})
            payload = json.loads(self.body or b"{}")
            if payload.get("tag") in repo.tags:
                raise HubError(409, f"Reference already exists: refs/tags/{payload.get('tag')}")
            repo.tags[payload["tag"]] = self.hub._revision(repo, name).sha
        return self._json({})

    def _settings(self, repo_type: str, repo_id: str) -> bool:
        repo = self._repo(repo_type, repo_id, write=True)
        payload = json.loads(self.body or b"{}")
        if "private" in payload:
            repo.private = bool(payload["private"])
        if payload.get("visibility") in ("private", "public"):
            repo.private = payload["visibility"] == "private"
        if "gated" in payload:
            repo.gated = payload["gated"] or False
        return self._json({})

    # -------------------------------------------------------------------------------------------- downloads

    def _resolve(self, method: str, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        repo = self._repo(repo_type, repo_id)
        self.hub._gate(repo, self.token)
        with self.hub._lock:
            commit = self.hub._revision(repo, revision)
            blob = commit.files.get(path)
            fault = next((f for f in self.hub.faults if f.applies(repo_type, repo_id, path, method)), None)
            if fault is not None and blob is not None:
                fault.served += 1
        if blob is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": commit.sha})
        if fault is not None and fault.delay_s:
            time.sleep(fault.delay_s)
        if fault is not None and fault.status:
            raise HubError(fault.status, f"loopback Hub fault: {fault.status}", None, {"X-Repo-Commit": commit.sha})
        name = path.rsplit("/", 1)[-1]
        headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{blob.etag}"', "Accept-Ranges": "bytes",
                   "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
                   "Vary": "Origin, Accept-Encoding", "Cache-Control": "private, max-age=0, must-revalidate"}
        if blob.lfs:
            headers.update({"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size)})
        start, end, status = 0, blob.size - 1, 200
        range_header = self.headers.get("Range")
        if range_header and blob.size:
            match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", range_header)
            if match and (match.group(1) or match.group(2)):
                if match.group(1):
                    start = int(match.group(1))
                    end = min(int(match.group(2)), blob.size - 1) if match.group(2) else blob.size - 1
                else:
                    start = max(blob.size - int(match.group(2)), 0)
                if start >= blob.size or start > end:
                    raise HubError(416, "Range Not Satisfiable", None, {"Content-Range": f"bytes */{blob.size}"})
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
        length = end - start + 1 if blob.size else 0
        content_type = "application/octet-stream" if blob.lfs else "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if method == "HEAD" or not length:
            return
        if fault is not None:
            fault.started.set()
        self._body(self.hub.objects / blob.sha256, start, length, fault)

    def _body(self, stored: Path, start: int, length: int, fault: Fault | None) -> None:
        limit = fault.truncate_at if fault is not None and fault.truncate_at is not None else None
        rate = fault.bytes_per_s if fault is not None else None
        chunk = max(1, min(64 * 1024, int(rate / 20) if rate else 64 * 1024))
        sent = 0
        with stored.open("rb") as f:
            f.seek(start)
            while sent < length:
                if self.server.stopping:
                    raise _Dropped
                want = min(chunk, length - sent)
                if limit is not None:
                    want = min(want, limit - sent)
                    if want <= 0:
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        raise _Dropped
                data = f.read(want)
                self.wfile.write(data)
                sent += len(data)
                if rate:
                    self.wfile.flush()
                    time.sleep(len(data) / rate)
