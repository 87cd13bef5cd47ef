"""The loopback Hugging Face Hub (tests/hub_server.py) and the real clients against it.

The first tests speak HTTP to it from this process (urllib: git hashes, headers, ranges, errors, faults, stop and
restart), so they belong to the fast tier. The ``slow`` ones run ``huggingface_hub``, ``transformers``, ``peft``
and ``datasets`` in processes of their own, started with ``HF_ENDPOINT`` at the loopback Hub and ``HF_HOME`` in
a temporary folder (both are read when the libraries are imported), and check what they got back and what they
left in the cache: commit folders, ``refs/``, blobs named by etag, then the same loads with ``HF_HUB_OFFLINE=1``
and the Hub stopped.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hub_server import LoopbackHub, git_blob_oid

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_test"


def _http(hub: LoopbackHub, method: str, path: str, headers: dict[str, str] | None = None,
          body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """A request the way any HTTP client would send it (no Hub client involved)."""
    conn = http.client.HTTPConnection(hub.host, hub.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


@pytest.fixture
def small_hub(tmp_path: Path) -> Iterator[LoopbackHub]:
    with LoopbackHub(tmp_path / "hub", token=TOKEN) as hub:
        yield hub


# ------------------------------------------------------------------------------------ the server itself


def test_git_hashes_and_carried_over_files(small_hub: LoopbackHub) -> None:
    hub = small_hub
    assert git_blob_oid(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # `git hash-object /dev/null`
    assert git_blob_oid(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    first = hub.add_commit("org/m", {"a.txt": b"hello\n", "dir/b.txt": "b", "dir/sub/c.txt": b"c"})
    second = hub.add_commit("org/m", {"a.txt": b"changed", "dir": None, "w.safetensors": b"\0" * 100})
    assert len(first) == len(second) == 40 and first != second
    assert hub.files("org/m", first) == ["a.txt", "dir/b.txt", "dir/sub/c.txt"]
    assert hub.files("org/m") == ["a.txt", "w.safetensors"]
    assert hub.read("org/m", "a.txt", first) == b"hello\n" and hub.read("org/m", "a.txt") == b"changed"
    assert hub.repo("org/m").commits[second].parent == first
    # the trees git writes (`git write-tree` of the same files; "dir" sorts after "dir-x.txt", as in git)
    only_a = hub.add_commit("org/n", {"a.txt": b"hello\n"})
    assert hub.repo("org/n").commits[only_a].tree == "2e81171448eb9f2ee3821e3d447aa6b2fe3ddba1"
    nested = hub.add_commit("org/n", {"dir/b.txt": b"b", "dir/sub/c.txt": b"c", "dir-x.txt": b"x"})
    assert hub.repo("org/n").commits[nested].tree == "46a2e0cab75459e1439454462ea550617e42ff2e"
    with pytest.raises(KeyError):
        hub.add_commit("org/m", {"missing.txt": None})


def test_resolve_headers_ranges_and_errors(small_hub: LoopbackHub) -> None:
    hub = small_hub
    weights = os.urandom(3000)
    config = b'{"a": 1}'
    sha = hub.add_commit("org/m", {"config.json": config, "model.safetensors": weights})
    status, headers, body = _http(hub, "HEAD", "/org/m/resolve/main/config.json")
    assert status == 200 and body == b""
    assert headers["X-Repo-Commit"] == sha and headers["ETag"] == f'"{git_blob_oid(config)}"'
    assert headers["Content-Length"] == "8" and "X-Linked-Etag" not in headers
    assert not any(key.lower().startswith("x-xet") for key in headers)
    status, headers, body = _http(hub, "GET", f"/org/m/resolve/{sha}/model.safetensors")
    lfs = hashlib.sha256(weights).hexdigest()
    assert status == 200 and body == weights
    assert headers["X-Linked-Etag"] == f'"{lfs}"' and headers["X-Linked-Size"] == "3000"
    status, headers, body = _http(hub, "GET", "/org/m/resolve/main/model.safetensors", {"Range": "bytes=1000-"})
    assert status == 206 and body == weights[1000:] and headers["Content-Range"] == "bytes 1000-2999/3000"
    status, _, body = _http(hub, "GET", "/org/m/resolve/main/model.safetensors", {"Range": "bytes=-10"})
    assert status == 206 and body == weights[-10:]
    status, headers, _ = _http(hub, "GET", "/org/m/resolve/main/model.safetensors", {"Range": "bytes=3000-"})
    assert status == 416 and headers["Content-Range"] == "bytes */3000"

    def error(path: str, headers: dict[str, str] | None = None) -> tuple[int, str | None]:
        status, answer, _ = _http(hub, "GET", path, headers)
        return status, answer.get("X-Error-Code")

    assert error("/org/m/resolve/main/nope.txt") == (404, "EntryNotFound")
    assert error("/org/m/resolve/nobranch/config.json") == (404, "RevisionNotFound")
    assert error("/org/other/resolve/main/config.json") == (401, "RepoNotFound")
    assert error("/api/models/org/other", {"Authorization": f"Bearer {TOKEN}"}) == (404, "RepoNotFound")
    assert error("/api/models/org/m", {"Authorization": "Bearer wrong"}) == (401, None)
    hub.set_private("org/m")
    assert error("/api/models/org/m") == (401, "RepoNotFound")
    assert _http(hub, "GET", "/api/models/org/m", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
    hub.set_private("org/m", False)
    hub.set_gated("org/m")
    assert _http(hub, "GET", "/api/models/org/m")[0] == 200  # a gated repo's card and file list are public
    assert error("/org/m/resolve/main/config.json") == (401, "GatedRepo")
    assert _http(hub, "GET", "/org/m/resolve/main/config.json", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
    hub.set_gated("org/m", granted=["hf_other"])
    assert error("/org/m/resolve/main/config.json", {"Authorization": f"Bearer {TOKEN}"}) == (403, "GatedRepo")
    assert hub.unhandled == []


def test_tree_pages_and_paths_info(tmp_path: Path) -> None:
    with LoopbackHub(tmp_path / "hub", tree_page_size=2) as hub:
        hub.add_commit("org/d", {"README.md": b"---\nlicense: mit\n---\n", "a/1.txt": b"1", "a/2.txt": b"2",
                                 "b.txt": b"b"}, repo_type="dataset")
        path, names = "/api/datasets/org/d/tree/main?recursive=true", []
        while path:
            status, headers, body = _http(hub, "GET", path)
            assert status == 200
            names += [entry["path"] for entry in json.loads(body)]
            link = headers.get("Link", "")
            path = link[link.index(hub.endpoint) + len(hub.endpoint):link.index(">")] if link else ""
        assert names == ["README.md", "a", "a/1.txt", "a/2.txt", "b.txt"]
        status, _, body = _http(hub, "POST", "/api/datasets/org/d/paths-info/main",
                                {"Content-Type": "application/x-www-form-urlencoded"},
                                b"paths=a&paths=b.txt&paths=gone&expand=true")
        entries = json.loads(body)
        assert [(e["type"], e["path"]) for e in entries] == [("directory", "a"), ("file", "b.txt")]
        assert entries[1]["lastCommit"]["id"] == hub.repo("org/d", "dataset").branches["main"]
        info = json.loads(_http(hub, "GET", "/api/datasets/org/d")[2])
        assert info["cardData"] == {"license": "mit"} and info["sha"] == entries[1]["lastCommit"]["id"]


def test_faults_stop_and_restart(small_hub: LoopbackHub) -> None:
    hub = small_hub
    data = os.urandom(200_000)
    hub.add_commit("org/m", {"big.bin": data})
    fault = hub.fault("org/m", "big.bin", truncate_at=50_000, times=1)
    conn = http.client.HTTPConnection(hub.host, hub.port, timeout=10)
    conn.request("GET", "/org/m/resolve/main/big.bin")
    response = conn.getresponse()
    assert response.getheader("Content-Length") == "200000"
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    assert len(cut.value.partial) == 50_000 and fault.served == 1 and fault.started.is_set()
    assert _http(hub, "GET", "/org/m/resolve/main/big.bin")[2] == data  # once only
    hub.fault("org/m", "*.bin", status=503, methods=["HEAD"])
    assert _http(hub, "HEAD", "/org/m/resolve/main/big.bin")[0] == 503
    hub.clear_faults()
    port = hub.port
    hub.stop()
    with pytest.raises(ConnectionRefusedError):
        _http(hub, "HEAD", "/org/m/resolve/main/big.bin")
    hub.start()
    assert hub.port == port and _http(hub, "HEAD", "/org/m/resolve/main/big.bin")[0] == 200


def test_stop_drops_a_transfer_under_way(small_hub: LoopbackHub) -> None:
    hub = small_hub
    hub.add_commit("org/m", {"big.bin": os.urandom(100_000)})
    fault = hub.fault("org/m", "big.bin", bytes_per_s=20_000)
    request = urllib.request.urlopen(f"{hub.endpoint}/org/m/resolve/main/big.bin", timeout=10)
    assert fault.started.wait(5)
    started = time.monotonic()
    hub.stop()
    with pytest.raises(http.client.IncompleteRead):
        request.read()
    assert time.monotonic() - started < 3
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{hub.endpoint}/api/models/org/m", timeout=5)


# ------------------------------------------------------------------------------------ the real clients

PRELUDE = """\
import json, os, sys
out = {}
def error(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as e:
        return type(e).__name__
    return None
"""


def run_client(hub: LoopbackHub, hf_home: Path, code: str, timeout: float = 240, **env: str) -> dict[str, Any]:
    """Run ``code`` (which fills the dict ``out``) in a new Python with ``HF_ENDPOINT`` at ``hub`` and ``HF_HOME``
    at ``hf_home``, set before anything is imported; return ``out``. The Hub and cache settings of this
    process's environment (a token, offline mode, cache folders) are left out."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    environ.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(hf_home), HF_HUB_DISABLE_PROGRESS_BARS="1", **env)
    script = PRELUDE + textwrap.dedent(code) + "\nprint('OUT ' + json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", script], env=environ, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("OUT ")]
    assert proc.returncode == 0 and lines, f"client failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n" \
                                           f"{proc.stderr[-6000:]}"
    return json.loads(lines[-1][4:])


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackHub]:
    """The module's Hub: org/model with three commits (``v1`` tags the first, ``dev`` branches off it), a gated,
    a private and a dataset repo. A tree page of 3 entries makes every listing the clients do paginate."""
    with LoopbackHub(tmp_path_factory.mktemp("hub"), token=TOKEN, tree_page_size=3) as hub:
        v1 = hub.add_commit("org/model", {"config.json": b'{"v": 1}', "model.safetensors": os.urandom(4096),
                                          "notes/a.txt": b"a", "notes/b.md": b"b"}, message="first")
        hub.tag("org/model", "v1", v1)
        hub.add_commit("org/model", {"config.json": b'{"v": 2}', "notes/b.md": None}, message="second")
        hub.add_commit("org/model", {"big.bin": os.urandom(300_000)}, message="third")
        hub.add_commit("org/model", {"config.json": b'{"v": "dev"}'}, branch="dev", parent=v1)
        hub.add_commit("org/gated", {"config.json": b'{"gated": true}'})
        hub.set_gated("org/gated")
        hub.add_commit("org/private", {"config.json": b'{"private": true}'})
        hub.set_private("org/private")
        hub.add_commit("org/table", {"README.md": b"---\nlicense: mit\npretty_name: Table\n---\n# Table\n",
                                     "data/train.csv": b"a,b\n1,2\n"}, repo_type="dataset")
        yield hub


@pytest.mark.slow
def test_repo_info_refs_and_trees(hub: LoopbackHub, tmp_path: Path) -> None:
    repo = hub.repo("org/model")
    out = run_client(hub, tmp_path / "hf", """
        from huggingface_hub import HfApi, HfFileSystem, list_repo_refs
        api = HfApi()
        info = api.model_info("org/model")
        out["main"] = [info.sha, info.id, info.private, info.gated, [s.rfilename for s in info.siblings]]
        info = api.model_info("org/model", revision="v1", files_metadata=True)
        out["v1"] = [info.sha, {s.rfilename: [s.size, s.blob_id, s.lfs and s.lfs.sha256] for s in info.siblings}]
        out["dev"] = api.model_info("org/model", revision="dev").sha
        d = api.dataset_info("org/table", files_metadata=True)
        out["dataset"] = [d.sha, d.card_data.pretty_name, sorted(s.rfilename for s in d.siblings)]
        refs = list_repo_refs("org/model")
        out["refs"] = [{r.name: r.target_commit for r in refs.branches}, {r.name: r.target_commit for r in refs.tags}]
        out["tree"] = sorted(f.path for f in api.list_repo_tree("org/model", recursive=True))
        out["top"] = sorted(type(f).__name__ + ":" + f.path for f in api.list_repo_tree("org/model", revision="v1"))
        out["paths"] = [f.path for f in api.get_paths_info("org/model", ["config.json", "notes", "gone"])]
        out["commits"] = [c.title for c in api.list_repo_commits("org/model")]
        out["exists"] = [api.file_exists("org/model", "big.bin"), api.file_exists("org/model", "gone"),
                         api.repo_exists("org/model"), api.repo_exists("org/gone")]
        fs = HfFileSystem()
        out["glob"] = fs.glob("org/model@v1/notes/*")
        with fs.open("org/model/big.bin", "rb", block_size=65536) as f:
            f.seek(100_000)
            out["range"] = f.read(16).hex()
        out["dataset_fs"] = fs.ls("datasets/org/table/data", detail=False)
    """)
    main, v1 = repo.branches["main"], repo.tags["v1"]
    assert out["main"] == [main, "org/model", False, False, hub.files("org/model")]
    commit = repo.commits[v1]
    assert out["v1"][0] == v1 and out["v1"][1] == {
        path: [blob.size, blob.oid, blob.sha256 if blob.lfs else None] for path, blob in commit.files.items()}
    assert out["v1"][1]["model.safetensors"][2] is not None and out["v1"][1]["config.json"][2] is None
    assert out["dev"] == repo.branches["dev"] != v1
    assert out["dataset"] == [hub.repo("org/table", "dataset").branches["main"], "Table", ["README.md",
                                                                                         "data/train.csv"]]
    assert out["refs"] == [dict(repo.branches), dict(repo.tags)]
    assert out["tree"] == sorted(hub.files("org/model") + ["notes"])
    assert out["top"] == ["RepoFile:config.json", "RepoFile:model.safetensors", "RepoFolder:notes"]
    assert out["paths"] == ["config.json", "notes"]
    assert out["commits"] == ["third", "second", "first"]
    assert out["exists"] == [True, False, True, False]
    assert out["glob"] == ["org/model@v1/notes/a.txt", "org/model@v1/notes/b.md"]
    assert out["range"] == hub.read("org/model", "big.bin")[100_000:100_016].hex()
    assert out["dataset_fs"] == ["datasets/org/table/data/train.csv"]
    assert hub.unhandled == []


@pytest.mark.slow
def test_downloads_land_in_the_cache_then_serve_offline(hub: LoopbackHub, tmp_path: Path) -> None:
    repo = hub.repo("org/model")
    main, v1, dev = repo.branches["main"], repo.tags["v1"], repo.branches["dev"]
    hf_home = tmp_path / "hf"
    out = run_client(hub, hf_home, f"""
        from huggingface_hub import hf_hub_download, snapshot_download, try_to_load_from_cache
        from huggingface_hub.file_download import _CACHED_NO_EXIST
        out["config"] = hf_hub_download("org/model", "config.json")
        out["weights_v1"] = hf_hub_download("org/model", "model.safetensors", revision="v1")
        out["snap_dev"] = snapshot_download("org/model", revision="dev", allow_patterns=["*.json", "notes/*"])
        out["snap_v1"] = snapshot_download("org/model", revision="v1", allow_patterns="notes/*")
        out["snap_sha"] = snapshot_download("org/model", revision="{main}", allow_patterns="big.bin")
        out["cached"] = try_to_load_from_cache("org/model", "config.json")
        out["cached_v1"] = try_to_load_from_cache("org/model", "notes/a.txt", revision="v1")
        out["never"] = try_to_load_from_cache("org/model", "config.json", revision="v1")
        out["missing"] = error(hf_hub_download, "org/model", "gone.txt")
        out["no_exist"] = try_to_load_from_cache("org/model", "gone.txt") is _CACHED_NO_EXIST
    """)
    cache = hf_home / "hub" / "models--org--model"
    assert out["config"] == str(cache / "snapshots" / main / "config.json")
    assert Path(out["config"]).read_bytes() == b'{"v": 2}'
    # the blobs are named by etag: git's blob id for small files, the LFS sha256 for the others
    assert Path(out["config"]).resolve() == cache / "blobs" / git_blob_oid(b'{"v": 2}')
    weights = repo.commits[v1].files["model.safetensors"]
    assert out["weights_v1"] == str(cache / "snapshots" / v1 / "model.safetensors")
    assert Path(out["weights_v1"]).resolve() == cache / "blobs" / weights.sha256
    assert out["snap_dev"] == str(cache / "snapshots" / dev)
    assert sorted(p.relative_to(cache / "snapshots" / dev).as_posix() for p in (cache / "snapshots" / dev).rglob("*")
                  if p.is_file()) == ["config.json", "notes/a.txt", "notes/b.md"]
    assert out["snap_v1"] == str(cache / "snapshots" / v1) and out["snap_sha"] == str(cache / "snapshots" / main)
    assert hashlib.sha256(Path(out["snap_sha"], "big.bin").read_bytes()).hexdigest() == \
        repo.commits[main].files["big.bin"].sha256
    assert {ref.name: ref.read_text() for ref in (cache / "refs").iterdir()} == {"main": main, "v1": v1, "dev": dev}
    assert (cache / "trees" / f"{v1}.json").exists()  # snapshot_download's cached listing of the commit
    assert out["cached"] == out["config"] and out["cached_v1"] == str(cache / "snapshots" / v1 / "notes/a.txt")
    assert out["never"] is None
    assert out["missing"] == "RemoteEntryNotFoundError" and out["no_exist"]
    assert (cache / ".no_exist" / main / "gone.txt").exists()

    # With the Hub stopped: in offline mode the clients read the cache and send nothing; without it, the HEAD
    # that fails to connect falls back to the cache (snapshot_download too)
    hub.stop()
    try:
        offline = run_client(hub, hf_home, """
            from huggingface_hub import hf_hub_download, snapshot_download
            out["config"] = hf_hub_download("org/model", "config.json")
            out["v1"] = snapshot_download("org/model", revision="v1", allow_patterns="notes/*")
            out["not_cached"] = error(hf_hub_download, "org/model", "model.safetensors", revision="dev")
            out["incomplete"] = error(snapshot_download, "org/model", revision="v1")
        """, HF_HUB_OFFLINE="1")
        assert offline == {"config": out["config"], "v1": out["snap_v1"], "not_cached": "LocalEntryNotFoundError",
                           "incomplete": "IncompleteSnapshotError"}
        started = time.monotonic()
        down = run_client(hub, hf_home, """
            from huggingface_hub import hf_hub_download, snapshot_download
            out["config"] = hf_hub_download("org/model", "config.json")
            out["dev"] = snapshot_download("org/model", revision="dev", allow_patterns=["*.json", "notes/*"])
        """)
        assert down == {"config": out["config"], "dev": out["snap_dev"]}
        # no backoff on these: the HEAD and the repo info are not retried (a file not in the cache would be,
        # 5 times over 23 s, before LocalEntryNotFoundError)
        assert time.monotonic() - started < 20
    finally:
        hub.start()


@pytest.mark.slow
def test_errors_tokens_and_gated_repos(hub: LoopbackHub, tmp_path: Path) -> None:
    code = """
        from huggingface_hub import HfApi, hf_hub_download, snapshot_download
        api = HfApi()
        out["missing_repo"] = error(api.model_info, "org/gone")
        out["missing_download"] = error(hf_hub_download, "org/gone", "config.json")
        out["private"] = error(api.model_info, "org/private")
        out["private_download"] = error(hf_hub_download, "org/private", "config.json")
        out["revision"] = error(api.model_info, "org/model", revision="nope")
        out["revision_download"] = error(hf_hub_download, "org/model", "config.json", revision="nope")
        out["entry"] = error(hf_hub_download, "org/model", "gone.txt")
        out["gated_info"] = api.model_info("org/gated").gated
        out["gated"] = error(hf_hub_download, "org/gated", "config.json")
        out["gated_snapshot"] = error(snapshot_download, "org/gated")
        from huggingface_hub.errors import EntryNotFoundError, RemoteEntryNotFoundError
        out["entry_is_entry"] = issubclass(RemoteEntryNotFoundError, EntryNotFoundError)
    """
    anonymous = run_client(hub, tmp_path / "anonymous", code)
    assert anonymous == {
        "missing_repo": "RepositoryNotFoundError", "missing_download": "RepositoryNotFoundError",
        "private": "RepositoryNotFoundError", "private_download": "RepositoryNotFoundError",
        "revision": "RevisionNotFoundError", "revision_download": "RevisionNotFoundError",
        "entry": "RemoteEntryNotFoundError", "gated_info": "auto", "gated": "GatedRepoError",
        "gated_snapshot": "GatedRepoError", "entry_is_entry": True}
    with_token = run_client(hub, tmp_path / "token", code + """
        out["gated"] = open(hf_hub_download("org/gated", "config.json")).read()
        out["private"] = api.model_info("org/private").private
        out["whoami"] = api.whoami()["name"]
    """, HF_TOKEN=TOKEN)
    assert with_token["gated"] == '{"gated": true}' and with_token["private"] is True
    assert with_token["missing_repo"] == "RepositoryNotFoundError" and with_token["entry"] == \
        "RemoteEntryNotFoundError" and with_token["whoami"] == "loopback"
    bad = run_client(hub, tmp_path / "bad", """
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError
        try:
            HfApi().model_info("org/model")
        except HfHubHTTPError as e:
            out["bad"] = [type(e).__name__, e.response.status_code]
    """, HF_TOKEN="hf_wrong")
    assert bad["bad"] == ["HfHubHTTPError", 401]
    auth = [r.headers.get("authorization") for r in hub.log if r.path == "/org/gated/resolve/main/config.json"]
    assert None in auth and f"Bearer {TOKEN}" in auth


@pytest.mark.slow
def test_create_repo_and_upload_then_download(hub: LoopbackHub, tmp_path: Path) -> None:
    folder = tmp_path / "export"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"pushed": 1}')
    (folder / "model.safetensors").write_bytes(os.urandom(50_000))
    (folder / "sub" / "notes.txt").write_text("notes")
    out = run_client(hub, tmp_path / "hf", f"""
        from huggingface_hub import HfApi, create_repo, upload_folder, hf_hub_download
        from huggingface_hub.errors import RepositoryNotFoundError
        url = create_repo("org/pushed", private=True)
        out["url"] = [str(url), url.repo_id]
        out["again"] = error(create_repo, "org/pushed")
        out["exist_ok"] = str(create_repo("org/pushed", private=True, exist_ok=True))
        first = upload_folder(repo_id="org/pushed", folder_path={str(folder)!r}, commit_message="export")
        out["first"] = [first.oid, first.commit_url]
        open({str(folder / "config.json")!r}, "w").write('{{"pushed": 2}}')
        second = HfApi().upload_folder(repo_id="org/pushed", folder_path={str(folder)!r}, commit_message="again",
                                       delete_patterns=["sub/*"], allow_patterns=["*.json", "*.safetensors"])
        out["second"] = second.oid
        out["config"] = open(hf_hub_download("org/pushed", "config.json")).read()
        out["old_notes"] = open(hf_hub_download("org/pushed", "sub/notes.txt", revision=first.oid)).read()
        out["anonymous"] = error(HfApi(token=False).model_info, "org/pushed")
        api = HfApi()
        api.create_branch("org/pushed", branch="export-1")
        out["branch"] = api.upload_file(path_or_fileobj=b"on a branch", path_in_repo="BRANCH.txt",
                                        repo_id="org/pushed", revision="export-1").oid
        api.create_tag("org/pushed", tag="exported", revision="export-1")
        api.update_repo_settings("org/pushed", private=False)
        out["public"] = HfApi(token=False).model_info("org/pushed", revision="exported").sha
        data = create_repo("org/pushed-data", repo_type="dataset")
        out["file"] = HfApi().upload_file(path_or_fileobj=b"x,y\\n1,2\\n", path_in_repo="train.csv",
                                          repo_id="org/pushed-data", repo_type="dataset").oid
    """, HF_TOKEN=TOKEN)
    repo = hub.repo("org/pushed")
    assert out["url"] == [f"{hub.endpoint}/org/pushed", "org/pushed"]
    assert out["again"] == "HfHubHTTPError" and out["exist_ok"] == out["url"][0]
    first = out["first"][0]
    assert out["first"][1] == f"{hub.endpoint}/org/pushed/commit/{first}"
    assert hub.files("org/pushed", first) == [".gitattributes", "config.json", "model.safetensors", "sub/notes.txt"]
    assert hub.read("org/pushed", "model.safetensors", first) == (folder / "model.safetensors").read_bytes()
    assert repo.commits[first].files["model.safetensors"].lfs  # served as the Hub serves an LFS file
    # the second push: unchanged files were left out (preupload's oid), sub/ deleted, one commit on main
    assert out["second"] == repo.branches["main"] and repo.commits[out["second"]].parent == first
    assert repo.commits[out["second"]].changed == ["sub/notes.txt", "config.json"]
    assert hub.files("org/pushed") == [".gitattributes", "config.json", "model.safetensors"]
    assert out["config"] == '{"pushed": 2}' and out["old_notes"] == "notes"
    assert out["anonymous"] == "RepositoryNotFoundError"
    assert repo.branches["export-1"] == repo.tags["exported"] == out["branch"] == out["public"]
    assert repo.commits[out["branch"]].parent == out["second"] and "BRANCH.txt" not in hub.files("org/pushed")
    assert not repo.private
    assert hub.read("org/pushed-data", "train.csv", repo_type="dataset") == b"x,y\n1,2\n"
    assert out["file"] == hub.repo("org/pushed-data", "dataset").branches["main"]
    assert hub.unhandled == []


@pytest.mark.slow
def test_interrupted_downloads_resume(hub: LoopbackHub, tmp_path: Path) -> None:
    repo = hub.repo("org/model")
    big = repo.commits[repo.branches["main"]].files["big.bin"]
    # the connection dropped mid-file: huggingface_hub resumes with a Range request in the same call, from the
    # last whole chunk it wrote (its DOWNLOAD_CHUNK_SIZE, 10 MiB: a smaller file starts over)
    huge = os.urandom(12 * 1024 * 1024)
    hub.add_commit("org/huge", {"huge.bin": huge})
    hub.clear_requests()
    hub.fault("org/huge", "huge.bin", truncate_at=11 * 1024 * 1024, times=1)
    try:
        out = run_client(hub, tmp_path / "hf", """
            from huggingface_hub import constants, hf_hub_download
            out["path"] = hf_hub_download("org/huge", "huge.bin")
            out["chunk"] = constants.DOWNLOAD_CHUNK_SIZE
        """)
    finally:
        hub.clear_faults()
    assert Path(out["path"]).read_bytes() == huge
    gets = [(r.headers.get("range"), r.status) for r in hub.log if r.method == "GET" and r.path.endswith("/huge.bin")]
    assert gets == [(None, 200), (f"bytes={out['chunk']}-", 206)]

    # a download killed midway leaves only its own .incomplete file; the next one starts over and completes
    hf_home = tmp_path / "killed"
    fault = hub.fault("org/model", "big.bin", bytes_per_s=60_000)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    environ.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(hf_home))
    proc = subprocess.Popen([sys.executable, "-c", "from huggingface_hub import hf_hub_download; "
                             "hf_hub_download('org/model', 'big.bin')"], env=environ, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        assert fault.started.wait(60)
        time.sleep(0.5)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        hub.clear_faults()
    blobs = hf_home / "hub" / "models--org--model" / "blobs"
    assert [p.name.startswith(big.sha256) and p.name.endswith(".incomplete") for p in blobs.iterdir()] == [True]
    out = run_client(hub, hf_home, """
        from huggingface_hub import hf_hub_download
        out["path"] = hf_hub_download("org/model", "big.bin")
    """)
    assert Path(out["path"]).resolve() == blobs / big.sha256
    assert hashlib.sha256((blobs / big.sha256).read_bytes()).hexdigest() == big.sha256

    # the Hub answering 5xx to the HEAD: a cached file is still served; a GET that fails raises
    hub.fault("org/model", "big.bin", status=503, methods=["HEAD"])
    try:
        again = run_client(hub, hf_home, """
            from huggingface_hub import hf_hub_download
            out["path"] = hf_hub_download("org/model", "big.bin")
        """)
    finally:
        hub.clear_faults()
    assert again == out
    hub.fault("org/model", "big.bin", status=500, methods=["GET"])
    try:
        failed = run_client(hub, tmp_path / "failed", """
            from huggingface_hub import hf_hub_download
            out["error"] = error(hf_hub_download, "org/model", "big.bin")
        """)
    finally:
        hub.clear_faults()
    assert failed["error"] == "HfHubHTTPError"


# ------------------------------------------------------------------ transformers, peft and datasets by name

README = """---
configs:
- config_name: alpha
  data_files:
  - split: train
    path: alpha/train-*.parquet
  - split: validation
    path: alpha/validation.parquet
- config_name: beta
  data_files:
  - split: train
    path: beta/train.parquet
  - split: validation
    path: beta/validation.parquet
---
# Loopback data
"""


@pytest.fixture(scope="module")
def library_repos(hub: LoopbackHub, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """org/tiny (a tiny random Llama, safetensors in 4 shards and an index, and its tokenizer), org/adapter (a
    LoRA adapter for it), org/data (two parquet configs, ``v1`` tagged before beta's train split grew a row) and
    org/lines (jsonl train and validation files, no card). Returns the local folders they were made from."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.hf_models import save_tokenizer

    root = tmp_path_factory.mktemp("library-repos")
    tiny, adapter, data, lines = root / "tiny", root / "adapter", root / "data", root / "lines"
    tiny.mkdir()
    vocab = save_tokenizer(tiny)
    cfg = AutoConfig.for_model("llama", hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=32, vocab_size=vocab, max_position_embeddings=64, pad_token_id=0,
                               bos_token_id=2, eos_token_id=3)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(tiny, max_shard_size="20KB")
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:  # zeros at init: make the adapter change the model
            torch.nn.init.normal_(param)
    peft_model.save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "org/tiny"}))

    for split, rows in (("alpha/train-00000-of-00002", 3), ("alpha/train-00001-of-00002", 3),
                        ("alpha/validation", 1), ("beta/train", 4), ("beta/validation", 1)):
        (data / split).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": [f"{split} {i}" for i in range(rows)]}), data / f"{split}.parquet")
    (data / "README.md").write_text(README)
    lines.mkdir()
    for split, rows in (("train", 4), ("validation", 2)):
        (lines / f"{split}.jsonl").write_text("".join(json.dumps({"text": f"{split} {i}"}) + "\n"
                                                      for i in range(rows)))
    hub.add_folder("org/tiny", tiny)
    hub.add_folder("org/adapter", adapter)
    v1 = hub.add_folder("org/data", data, repo_type="dataset")
    hub.tag("org/data", "v1", v1, repo_type="dataset")
    pq.write_table(pa.table({"text": [f"beta/train {i}" for i in range(5)]}), root / "beta-train.parquet")
    hub.add_commit("org/data", {"beta/train.parquet": root / "beta-train.parquet"}, repo_type="dataset",
                   message="beta: one more row")
    hub.add_folder("org/lines", lines, repo_type="dataset")
    return {"tiny": tiny, "adapter": adapter}


LIBRARIES = """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained("org/tiny")
    local = AutoModelForCausalLM.from_pretrained(TINY)
    out["weights"] = all(torch.equal(p, local.state_dict()[k]) for k, p in model.state_dict().items())
    tokenizer = AutoTokenizer.from_pretrained("org/tiny")
    out["tokens"] = tokenizer("def add(a, b):")["input_ids"] == AutoTokenizer.from_pretrained(TINY)(
        "def add(a, b):")["input_ids"]
    from peft import PeftModel
    from safetensors.torch import load_file
    peft = PeftModel.from_pretrained(model, "org/adapter")
    saved = load_file(ADAPTER + "/adapter_model.safetensors")
    lora = {k: v for k, v in peft.state_dict().items() if "lora_" in k}
    out["adapter"] = [len(saved), len(lora), all(torch.equal(v, lora[k.replace(".weight", ".default.weight")])
                                                 for k, v in saved.items())]
    import datasets
    def rows(*args, **kwargs):
        return list(datasets.load_dataset(*args, **kwargs)["text"])
    out["alpha"] = rows("org/data", name="alpha", split="train", revision="v1")
    out["beta_main"] = rows("org/data", name="beta", split="train", revision="main")
    out["beta_v1"] = rows("org/data", name="beta", split="train", revision="v1")
    out["lines"] = rows("org/lines", split="validation")
"""


@pytest.mark.slow
def test_libraries_load_by_name_then_offline(hub: LoopbackHub, library_repos: dict[str, Any],
                                             tmp_path: Path) -> None:
    code = f"TINY, ADAPTER = {str(library_repos['tiny'])!r}, {str(library_repos['adapter'])!r}\n" + \
        textwrap.dedent(LIBRARIES)
    hf_home = tmp_path / "hf"
    hub.clear_requests()
    online = run_client(hub, hf_home, code)
    assert online["weights"] and online["tokens"]
    assert online["adapter"][0] == online["adapter"][1] == 8 and online["adapter"][2]
    assert online["alpha"] == [f"alpha/train-0000{s}-of-00002 {i}" for s in range(2) for i in range(3)]
    assert online["beta_main"] == [f"beta/train {i}" for i in range(5)]
    assert online["beta_v1"] == [f"beta/train {i}" for i in range(4)]
    assert online["lines"] == ["validation 0", "validation 1"]
    cache = hf_home / "hub"
    tiny = hub.repo("org/tiny")
    assert {p.name for p in (cache / "models--org--tiny" / "snapshots" / tiny.branches["main"]).iterdir()} >= {
        "config.json", "model.safetensors.index.json", "model-00001-of-00004.safetensors", "tokenizer.json"}
    data = hub.repo("org/data", "dataset")
    assert (cache / "datasets--org--data" / "refs" / "v1").read_text() == data.tags["v1"]
    assert hub.unhandled == []

    hub.stop()
    try:
        offline = run_client(hub, hf_home, code, HF_HUB_OFFLINE="1")
    finally:
        hub.start()
    # datasets offline reloads the newest build of a config it has prepared, whatever the revision asked:
    # beta at main comes back as v1's four rows, the build made last
    assert offline == {**online, "beta_main": online["beta_v1"]}
