"""The store prepared data lives in: flat arrays read through memory maps, named by the data's content (each field
of the key changes it; a touched file does not), prepared once whoever asks (the others wait, bounded), with
progress said as it goes; and packing on arrays, row for row the one-example-at-a-time best-fit decreasing."""

from __future__ import annotations

import errno
import json
import os
import pickle
import random
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runner.atomic_files import DiskFullError
from runner.data import store as store_pkg
from runner.data.fingerprint import changes, data_fingerprint
from runner.data.instruct import InstructDataModule
from runner.data.instruct.layout import layout_key
from runner.data.instruct.prepare import _PREPARED, examples_key, prepare
from runner.data.store import content
from runner.data.store.arrays import Store, StoreWriter, token_dtype
from runner.data.store.progress import Heartbeat, Progress
from runner.data.store.shared import PrepareTimeout, prepared, progress_file
from runner.data.tokens.tokenizers import load_tokenizer, tokenizer_stamp
from runner.packing.bins import best_fit_decreasing, pack_rows
from tests.hf_models import save_tokenizer


def _rows(path: Path, n: int = 30, salt: str = "") -> Path:
    path.write_text("".join(json.dumps({"prompt": f"question {i}{salt}?", "response": f"answer {i}"}) + "\n"
                            for i in range(n)))
    return path


def test_a_store_reads_back_what_was_written_in_the_narrowest_dtype(tmp_path: Path) -> None:
    assert [token_dtype(n) for n in (255, 256, 65535, 65536)] == [np.uint8, np.uint16, np.uint16, np.int32]
    writer = StoreWriter(tmp_path / "s", ragged={"ids": token_dtype(300)}, rows={"label": "int8"})
    writer.append({"ids": (np.array([1, 2, 3, 299]), np.array([3, 1]))}, {"label": np.array([5, 6])})
    writer.append({"ids": (np.array([], dtype=np.int64), np.array([0]))}, {"label": np.array([7])})
    writer.finish({"said": "hello"})
    store = Store(tmp_path / "s")
    ids = store.ragged("ids")
    assert store.rows == 3 and store.meta == {"said": "hello"} and len(ids) == 3
    assert ids.values.array.dtype == np.uint16 and ids.values[:].tolist() == [1, 2, 3, 299]
    assert [b.tolist() for b in ids.bounds()] == [[0, 3, 4], [3, 4, 4]]
    assert store.column("label")[:].tolist() == [5, 6, 7]
    copied = pickle.loads(pickle.dumps(ids.values))  # a data loader's worker maps the file, it gets no copy
    assert len(pickle.dumps(ids.values)) < 400 and copied[1:3].tolist() == [2, 3]
    with pytest.raises(ValueError, match="outside uint8"):
        StoreWriter(tmp_path / "t", ragged={"ids": np.uint8}).append({"ids": (np.array([256]), np.array([1]))})


def test_a_touched_file_keeps_its_digest_a_changed_one_does_not_and_an_appended_one_is_read_from_where_it_grew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(content, "BLOCK", 1024)
    started: list[int] = []
    chain = content._chain
    monkeypatch.setattr(content, "_chain", lambda state, f, blocks, buffer: (started.append(f.tell()),
                                                                             chain(state, f, blocks, buffer))[1])
    index, f = tmp_path / "index", tmp_path / "rows.jsonl"
    f.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(10_000)))
    first = content.digests([f], index)[0]
    started.clear()
    os.utime(f, ns=(1, 1))  # touched: new times, the same bytes
    assert content.digests([f], index)[0] == first and started == [0]  # read again once, the same digest
    assert content.digests([f], index)[0] == first and started == [0]  # then a stat
    with f.open("ab") as out:
        out.write(b"appended rows\n" * 100)
    grown = content.digests([f], index)[0]
    assert started[-1] == 9 * 1024  # from its last full block: the old bytes before it are not read again
    assert grown == content.digests([f], tmp_path / "fresh")[0] != first  # what hashing all of it gives
    data = bytearray(f.read_bytes())
    data[5] ^= 1
    f.write_bytes(bytes(data))  # the same size, one bit changed
    assert content.digests([f], index)[0] not in (grown, first) and started[-1] == 0


def test_each_field_of_the_cache_key_changes_it_and_a_copy_of_a_tokenizer_does_not(tmp_path: Path) -> None:
    save_tokenizer(tmp_path / "a" / "tok")
    shutil.copytree(tmp_path / "a" / "tok", tmp_path / "copy")
    save_tokenizer(tmp_path / "b" / "tok", vocab_size=300)  # another tokenizer under the same name
    stamp = [tokenizer_stamp(load_tokenizer(str(p))) for p in (tmp_path / "a" / "tok", tmp_path / "copy",
                                                                 tmp_path / "b" / "tok")]
    assert stamp[0] == stamp[1] != stamp[2] and tokenizer_stamp(load_tokenizer("bytes")) not in stamp
    chat = tmp_path / "a" / "tok" / "chat_template.jinja"  # transformers saves a chat template as a file of its own
    chat.write_text("{{ messages }}")
    assert tokenizer_stamp(load_tokenizer(str(tmp_path / "a" / "tok"))) != stamp[0]

    data = [store_pkg.digest_files([_rows(tmp_path / f"{s}.jsonl", salt=s)]) for s in ("x", "y")]
    base = dict(data_digest=data[0], tokenizer=stamp[0], prompt_column="prompt", response_column="response",
                messages_column=None, prompt_template=None, chat_template=None, max_examples=None)
    changed = {"data_digest": data[1], "tokenizer": stamp[2], "prompt_column": "q", "response_column": "a",
               "messages_column": "messages", "prompt_template": "Q: {prompt}\nA: ", "chat_template": "{{ x }}",
               "max_examples": 10, "roles": {"bot": "assistant"}}
    keys = {field: examples_key(**{**base, field: value}) for field, value in changed.items()}  # type: ignore[arg-type]
    assert examples_key(**{**base, "roles": {}}) == examples_key(**base)  # type: ignore[arg-type]  # none given
    assert len({examples_key(**base), *keys.values()}) == len(changed) + 1, keys
    layout = dict(parts=[examples_key(**base)], seq_len=256, answers_only=True, packing=True, val_fraction=0.1,
                  seed=0)
    other = {"parts": [keys["data_digest"]], "seq_len": 512, "answers_only": False, "packing": False,
             "val_fraction": 0.2, "seed": 1}
    layouts = {field: layout_key(**{**layout, field: value}) for field, value in other.items()}  # type: ignore
    assert len({layout_key(**layout), *layouts.values()}) == len(other) + 1, layouts  # type: ignore[arg-type]


def test_a_touched_table_is_read_from_the_cache_and_a_changed_one_is_prepared_again(tmp_path: Path) -> None:
    path = _rows(tmp_path / "qa.jsonl")
    tokenizer = load_tokenizer("bytes")
    settings = dict(prompt_column="prompt", response_column="response", messages_column=None, prompt_template=None,
                    chat_template=None, max_examples=None)

    def fresh() -> Any:
        _PREPARED.clear()  # a new process
        return prepare(str(path), "data.path", tokenizer, **settings)  # type: ignore[arg-type]

    first = fresh()
    assert first.built and first.rows == 30
    os.utime(path, ns=(time.time_ns(), time.time_ns()))
    again = fresh()
    assert not again.built and again.key == first.key and again.store.directory == first.store.directory
    _rows(path, salt="!")  # the same rows, one character more in each prompt
    changed = fresh()
    assert changed.built and changed.key != first.key


CHAT = ("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}")


def _chats(path: Path, n: int = 12, second: str = "bot") -> Path:
    """ShareGPT rows: a question, an answer, a second answer in the role ``second`` (from row 5 on)."""
    path.write_text("".join(json.dumps({"conversations": [
        {"from": "human", "value": f"question {i}?"}, {"from": "gpt", "value": f"answer {i}"},
        {"from": "human", "value": "and?"}, {"from": second if i >= 5 else "gpt", "value": f"more {i}"}]}) + "\n"
        for i in range(n)))
    return path


def test_a_changed_roles_mapping_prepares_again_and_a_chats_turns_are_kept_with_its_store(tmp_path: Path) -> None:
    """data.roles decides which turns are answers: another mapping is another store (a stale one would train the
    old answers); the turns counted while preparing are read back from the store by a later run."""
    path = _chats(tmp_path / "share.jsonl")
    tokenizer = load_tokenizer("bytes")
    settings = dict(prompt_column="prompt", response_column="response", messages_column=None, prompt_template=None,
                    chat_template=CHAT, max_examples=None)

    def fresh(roles: dict[str, str]) -> Any:
        _PREPARED.clear()  # a new process
        return prepare(str(path), "data.path", tokenizer, **settings, roles=roles)  # type: ignore[arg-type]

    answer, kept = fresh({"bot": "assistant"}), fresh({"bot": "bot"})
    assert answer.built and kept.built and answer.store.directory != kept.store.directory
    assert answer.fmt.sharegpt and (answer.turns.answers, answer.turns.others) == (17 + 7, 24)
    assert (kept.turns.answers, kept.turns.others) == (17, 24 + 7)
    runs = [int(len(p.store.ragged("answers").values[:]) // 2) for p in (answer, kept)]
    assert runs == [24, 17]  # the stores' answer runs: one an assistant turn
    again = fresh({"bot": "assistant"})
    assert not again.built and again.turns == answer.turns and again.fmt == answer.fmt


def test_turns_are_counted_batch_by_batch_as_over_the_whole_column() -> None:
    import pyarrow as pa

    from runner.data.instruct.chat import count_turns, scan

    rows = [[{"role": "user", "content": "q"}, {"role": "assistant" if i != 7 else "bot", "content": "a"}]
            + ([{"role": "tool", "content": "t"}] if i % 4 == 0 else []) for i in range(10)]
    table = pa.table({"messages": rows})
    for roles in ({"tool": "tool"}, {"tool": "tool", "bot": "assistant"}):
        whole = scan(table.column("messages"), roles)
        batched = count_turns(table.to_batches(max_chunksize=3), "messages", roles)
        assert batched == whole
    assert batched.others == 10 + 3 and batched.unknown_row is None
    assert count_turns(table.to_batches(max_chunksize=3), "messages", {"tool": "tool"}).unknown_row == 7


def test_a_store_is_built_once_and_the_others_wait_for_it(tmp_path: Path) -> None:
    """One builder (local rank 0), a second run on the same data (rank 0 too: it waits on the lock) and another
    local rank (it waits for the store): one build, the same store for all three."""
    directory, go, built = tmp_path / "store" / "x", threading.Event(), []

    def build(tmp: Path) -> None:
        built.append(tmp)
        go.wait(10)
        progress_file(directory).write_text("{}")
        writer = StoreWriter(tmp, ragged={"ids": np.uint8})
        writer.append({"ids": (np.arange(4), np.array([4]))})
        writer.finish({})

    results: dict[str, Any] = {}

    def ask(name: str, rank: int) -> None:
        results[name] = prepared(directory, build, "the test's data", stall_s=20, rank=rank)

    threads = [threading.Thread(target=ask, args=("builder", 0))]
    threads[0].start()
    while not built:
        time.sleep(0.01)
    threads += [threading.Thread(target=ask, args=(name, rank)) for name, rank in (("other run", 0), ("rank 1", 1))]
    for t in threads[1:]:
        t.start()
    time.sleep(0.3)
    assert not any(name in results for name in ("other run", "rank 1"))  # both wait while it builds
    go.set()
    for t in threads:
        t.join(20)
    assert len(built) == 1 and [results[n][1] for n in ("builder", "other run", "rank 1")] == [True, False, False]
    assert {results[n][0].directory for n in results} == {directory}
    assert not list(directory.parent.glob(".*partial")) and not progress_file(directory).exists()


def test_a_waiter_gives_up_once_nothing_moves_and_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(PrepareTimeout, match="made no progress") as info:
        prepared(tmp_path / "never", lambda tmp: None, "data.path=x.jsonl", stall_s=0.5, rank=1)
    assert "\n" not in str(info.value) and "local rank 0" in str(info.value)


def test_a_build_that_fails_leaves_nothing_behind(tmp_path: Path) -> None:
    def fail(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        (tmp / "ids.values").write_bytes(b"half")
        raise ValueError("the data is bad")

    with pytest.raises(ValueError, match="the data is bad"):
        prepared(tmp_path / "s", fail, "x", rank=0)
    assert [p.name for p in tmp_path.iterdir()] == ["s.lock"]

    def full(tmp: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFullError, match="while preparing data.path=x.jsonl into .*HF_DATASETS_CACHE"):
        prepared(tmp_path / "s", full, "data.path=x.jsonl", rank=0)
    assert [p.name for p in tmp_path.iterdir()] == ["s.lock"]


def test_progress_says_rows_rate_and_time_left_once_it_takes_a_while(tmp_path: Path) -> None:
    now, said = [0.0], []
    progress = Progress("tokenizing data.path=x.jsonl", 1000, file=tmp_path / "p", sink=said.append, after_s=5,
                        every_s=10, clock=lambda: now[0])
    for _ in range(4):  # the first seconds: nothing said
        now[0] += 1
        progress.advance(100)
    assert said == [] and json.loads((tmp_path / "p").read_text())["done"] == 400  # the file: each second
    now[0] = 5
    progress.advance(100)
    assert said == ["data: tokenizing data.path=x.jsonl: 500 of 1,000 rows (50%), 100 rows/s, about 5 s left"]
    now[0] = 6
    progress.advance(100)
    assert len(said) == 1  # every 10 s
    now[0] = 8
    progress.advance(400)
    assert progress.finish() == 8 and said[-1] == "data: tokenizing data.path=x.jsonl: 1,000 rows in 8.0 s (125 rows/s)"
    beats: list[str] = []
    with Heartbeat("reading x.jsonl into Arrow", sink=beats.append, after_s=0.05, every_s=0.05):
        time.sleep(0.3)  # work that cannot count its rows: how long it has run, then the total
    assert beats[0].startswith("data: reading x.jsonl into Arrow: ") and beats[-1].endswith(" s")
    assert "done in" in beats[-1] and len(beats) >= 3
    with Heartbeat("quick", sink=beats.append, after_s=5):
        pass
    assert not any("quick" in b for b in beats)  # short work: nothing said


def _one_at_a_time(lengths: list[int], capacity: int) -> list[list[int]]:
    """Best-fit decreasing example by example (what runner did before packing on arrays): the reference."""
    from bisect import bisect_left, insort

    room: list[int] = []
    rows_with: dict[int, list[int]] = {}
    rows: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        j = bisect_left(room, n)
        if j < len(room):
            left = room[j]
            row = rows_with[left].pop()
            if not rows_with[left]:
                del rows_with[left]
                room.pop(j)
        else:
            left, row = capacity, len(rows)
            rows.append([])
        rows[row].append(i)
        left -= n
        if left > 0:
            if left not in rows_with:
                rows_with[left] = []
                insort(room, left)
            rows_with[left].append(row)
    return rows


def test_packing_on_arrays_makes_the_same_rows_as_one_example_at_a_time() -> None:
    rng = random.Random(0)
    for _ in range(200):
        capacity = rng.choice([7, 16, 64, 256, 512])
        lengths = [rng.randint(1, capacity if rng.random() < 0.6 else max(1, capacity // 6))
                   for _ in range(rng.randint(0, 300))]
        assert best_fit_decreasing(lengths, capacity) == _one_at_a_time(lengths, capacity)
    lengths = np.random.default_rng(0).integers(60, 512, 200_000)
    rows = pack_rows(lengths, 512)
    assert sorted(rows.order.tolist()) == list(range(len(lengths)))
    assert np.add.reduceat(lengths[rows.order], rows.starts[:-1]).max() <= 512


def test_a_resume_takes_a_touched_file_for_the_same_data_and_names_a_changed_one(tmp_path: Path) -> None:
    path = _rows(tmp_path / "qa.jsonl")
    before = data_fingerprint(str(path), None, "bytes")
    os.utime(path, ns=(1, 1))
    assert changes(before, data_fingerprint(str(path), None, "bytes")) == []
    _rows(path, salt="?")
    found = changes(before, data_fingerprint(str(path), None, "bytes"))
    assert len(found) == 1 and "qa.jsonl changed (" in found[0]


def test_instruction_examples_come_from_the_store_with_their_answers_marked(tmp_path: Path) -> None:
    data = InstructDataModule(str(_rows(tmp_path / "qa.jsonl", 40)), seq_len=64, batch_size=2, packing=True)
    data.setup()
    part = data._parts[0]
    ids = part.store.ragged("ids")
    assert ids.values.array.dtype == np.uint8 and isinstance(ids.values.array, np.memmap)
    assert part.store.directory.parent == store_pkg.root() / "store"
    x, _ = data._train[0], None  # a packed row reads its examples' ids through the maps
    assert x.shape == (4, 64)


@pytest.mark.slow
def test_worker_processes_write_the_store_one_process_writes(tmp_path: Path) -> None:
    """The rows through the encoder in 2 worker processes, in chunks: byte for byte the store one process writes."""
    from runner.data.instruct.encode import ANSWERS, IDS, PROBLEM, InstructEncoder
    from runner.data.instruct.formats import resolve_format
    from runner.data.reading.sources import resolve
    from runner.data.reading.tables import load_table
    from runner.data.store import parallel
    from runner.data.store.parallel import encode_into, table_batches

    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"instruction": f"do {i}", "input": "this" if i % 3 else "",
                                        "output": f"done {i}" if i % 50 else " "}) + "\n" for i in range(3000)))
    rows, _ = load_table(resolve(str(path)))
    fmt = resolve_format(rows.column_names, resolve(str(path)), "prompt", "response", None, None)
    stores = []
    for processes in (1, 2):
        writer = StoreWriter(tmp_path / str(processes), ragged={IDS: np.uint8, ANSWERS: np.int32},
                             rows={PROBLEM: np.int8})
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(parallel, "CHUNK_ROWS", 256)  # several chunks in flight
            encode_into(writer, table_batches(rows, list(fmt.columns)), InstructEncoder(fmt, None, None),
                        Progress("x", len(rows), sink=lambda _: None), processes)
        writer.finish({})
        stores.append(tmp_path / str(processes))
    for name in ("ids.values", "ids.offsets", "answers.values", "answers.offsets", "problem.rows"):
        assert (stores[0] / name).read_bytes() == (stores[1] / name).read_bytes(), name
    assert Store(stores[1]).rows == 3000 and int((Store(stores[1]).column(PROBLEM)[:] == 1).sum()) == 60


def test_a_fast_tokenizers_backend_gives_the_ids_its_call_gives(tmp_path: Path) -> None:
    """The encoders read ids from the backend (no offsets or masks built): the same ids, special tokens or not."""
    from runner.data.tokens.tokenizers import SavedTokenizer

    save_tokenizer(tmp_path / "tok")
    tok = SavedTokenizer(str(tmp_path / "tok"))
    texts = ["### Instruction:\nwhat is 12 + 30?\n\n### Response:\n", "42", "", "é ünï <s> </s> code()"]
    for special in (True, False):
        assert tok.ids(texts, special) == tok.tokenizer(texts, add_special_tokens=special)["input_ids"]


@pytest.mark.slow
def test_a_large_table_is_turned_into_arrow_in_a_process_of_its_own(tmp_path: Path) -> None:
    """datasets' conversion of a large table runs in a fresh process (its memory returned when it ends); the run
    then finds the table prepared in the same cache entry, the same rows."""
    import datasets

    from runner.data.reading.sources import resolve
    from runner.data.reading.tables import _prepare_apart, load_table

    source = resolve(str(_rows(tmp_path / "qa.jsonl", 50, salt="apart")))
    builder = datasets.load_dataset_builder("json", data_files=[str(f) for f in source.files])
    assert not os.path.exists(builder.cache_dir)
    _prepare_apart(source)
    assert os.path.exists(builder.cache_dir)  # prepared by the other process
    rows, cached = load_table(source)
    assert cached and len(rows) == 50 and rows[3]["prompt"] == "question 3apart?"


def test_a_touched_text_table_reads_its_token_ids_from_the_cache(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """datasets prepares a touched file's Arrow again (its key has the file's time); the same bytes, the same
    token store: nothing is tokenized again."""
    import logging

    from runner.data.reading import tables
    from runner.data.text import TextDataModule

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i} " * 20}) + "\n" for i in range(300)))
    TextDataModule(path=str(path), seq_len=64, batch_size=2, max_bytes=None).setup()
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    tables._LOADED.clear()  # a new process
    caplog.clear()  # the first run's lines are captured too where an earlier test left runner.data at INFO
    with caplog.at_level(logging.INFO, logger="runner.data"):
        TextDataModule(path=str(path), seq_len=64, batch_size=2, max_bytes=None).setup()
    assert "as Arrow" in caplog.text and "not tokenized again" in caplog.text and "tokenized 300" not in caplog.text
