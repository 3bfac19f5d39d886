"""What only the embedded Edge index has to get right: one owner per directory, durability of
acknowledged writes, background upkeep, and many threads sharing one set of open shards."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from qdrant_edge import Distance, EdgeConfig, EdgeShard, EdgeVectorParams, Point, UpdateOperation

from ragkb_core import ids
from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.errors import Conflict, InvalidInput, NotFound, Unavailable
from ragkb_core.kb_settings import KbIndexLayout
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index import build_index
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.edge_shards import ShardClosedError, ShardHandle, ShardMaintainer
from ragkb_retriever.index.port import IndexPoint

pytestmark = pytest.mark.integration

DIM = 16
KB = "a0b1"


def _points(kb_id: str, document_id: str, count: int, seed: int = 0) -> list[IndexPoint]:
    rng = random.Random(f"{seed}-{document_id}")
    return [
        IndexPoint(
            id=ids.point_id(kb_id, document_id, 1, ordinal),
            dense=[rng.gauss(0, 1) for _ in range(DIM)],
            sparse=SparseTerms(indices=sorted(rng.sample(range(100), 5)), values=[1.0] * 5),
            payload={"kb_id": kb_id, "document_id": document_id, "version": 1, "ordinal": ordinal, "labels": []},
        )
        for ordinal in range(count)
    ]


def _search(index: EdgeIndex, kb_id: str) -> int:
    sparse = SparseTerms(indices=[1, 2, 3], values=[1.0, 1.0, 1.0])
    results = index.search(kb_id, [0.5] * DIM, sparse, ScopeFilter(), 10, 40, 61)
    return len(results.fused)


def _shard(path: Path) -> EdgeShard:
    return EdgeShard.create(str(path), EdgeConfig(vectors={"dense": EdgeVectorParams(DIM, Distance.Cosine)}))


def _upkeep_count(operation: str) -> float:
    return REGISTRY.get_sample_value("ragkb_index_upkeep_seconds_count", {"operation": operation}) or 0.0


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def settings(tmp_path: Path) -> QdrantSettings:
    return QdrantSettings(path=tmp_path / "index", optimize_after_points=10_000)


@pytest.fixture
def index(settings: QdrantSettings) -> Iterator[EdgeIndex]:
    edge = EdgeIndex(settings)
    yield edge
    edge.close()


CRASHING_WRITER = """
import os, sys
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index import build_index
from ragkb_retriever.index.edge import EdgeIndex
from tests.integration.test_index_edge import KB, _points
index = EdgeIndex(QdrantSettings(path=sys.argv[1], flush_interval_s=3600, wal_sync_interval_s=3600))
index.create_kb(KB, 16)
for number in range(5):
    index.upsert(KB, _points(KB, f"doc{number}", 20))
index.delete_document(KB, "doc4")
print("acknowledged", flush=True)
os._exit(0)  # no close, no flush: what a killed process leaves
"""


def test_acknowledged_writes_survive_a_killed_process(settings: QdrantSettings) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, str(settings.path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "acknowledged" in done.stdout
    reopened = EdgeIndex(settings)
    try:
        assert reopened.count(KB) == 80
        assert reopened.count(KB, "doc4") == 0
        assert _search(reopened, KB) == 10
    finally:
        reopened.close()


def test_the_embedded_index_is_the_default(settings: QdrantSettings) -> None:
    # Not tried with a URL here: qdrant-client checks the server's version from a thread at
    # construction, and warns when nothing answers.
    embedded = build_index(settings)
    assert isinstance(embedded, EdgeIndex)
    embedded.close()


def test_one_process_owns_an_index_directory(settings: QdrantSettings) -> None:
    first = EdgeIndex(settings)
    with pytest.raises(Conflict):
        EdgeIndex(settings)
    first.close()
    EdgeIndex(settings).close()


def test_a_closed_index_refuses_calls_and_closes_once(index: EdgeIndex) -> None:
    index.create_kb(KB, DIM)
    index.close()
    index.close()
    with pytest.raises(Unavailable):
        index.kb_exists(KB)
    with pytest.raises(Unavailable):
        index.upsert(KB, _points(KB, "d", 1))


def test_a_generation_left_by_a_crashed_drop_is_not_revived(settings: QdrantSettings) -> None:
    index = EdgeIndex(settings)
    index.create_kb(KB, DIM)
    index.upsert(KB, _points(KB, "d", 30))
    index.close()
    # A drop removes the alias first; a crash right after leaves the shard directory behind.
    (settings.path / f"{ids.alias_name(KB)}.alias").unlink()
    index = EdgeIndex(settings)
    try:
        assert not index.kb_exists(KB)
        index.create_kb(KB, DIM)
        assert index.count(KB) == 0
    finally:
        index.close()


def test_optimize_builds_the_index_and_keeps_results(index: EdgeIndex) -> None:
    index.create_kb(KB, DIM)
    for number in range(10):
        index.upsert(KB, _points(KB, f"doc{number}", 50))
    before = index.search(KB, [0.5] * DIM, None, ScopeFilter(), 10, 40, 61)
    index.optimize(KB)
    assert index.search(KB, [0.5] * DIM, None, ScopeFilter(), 10, 40, 61) == before


def test_the_maintainer_optimises_a_shard_asked_for_in_the_background(tmp_path: Path) -> None:
    handle = ShardHandle("s", _shard(tmp_path / "s"))
    maintainer = ShardMaintainer(lambda: [handle], flush_interval_s=0.05, wal_sync_interval_s=0.05)
    try:
        assert handle.record_write(500) == 500
        for _ in range(3):  # asked for repeatedly, queued once
            maintainer.request_optimize(handle)
        _wait_for(lambda: handle.record_write() == 0)
    finally:
        maintainer.stop()
        handle.close()


def test_the_maintainer_syncs_a_written_shards_wal_long_before_it_flushes_it(tmp_path: Path) -> None:
    """A whole flush holds the GIL (every search of the retriever waits), so it runs rarely; the WAL's files are
    synced (os.fsync, GIL let go) soon after a write, which is what keeps an acknowledged write through a power
    loss."""
    shard_path = tmp_path / "s"
    handle = ShardHandle("s", _shard(shard_path), wal=shard_path / "wal")
    maintainer = ShardMaintainer(lambda: [handle], flush_interval_s=3600, wal_sync_interval_s=0.05)
    syncs_before, flushes_before = _upkeep_count("wal_sync"), _upkeep_count("flush")
    try:
        with handle.use() as shard:
            shard.update(UpdateOperation.upsert_points([Point(n, {"dense": [0.5] * DIM}, {}) for n in range(3)]))
        handle.record_write(3)
        assert handle.awaiting_wal_sync and handle.awaiting_flush
        # Synced, and timed where operators see it (the flag is cleared as the sync starts, the time noted at its end).
        _wait_for(lambda: not handle.awaiting_wal_sync and _upkeep_count("wal_sync") == syncs_before + 1)
        assert handle.awaiting_flush  # the whole flush waits for its own, much longer interval
        handle.flush_if_written()
        assert not handle.awaiting_flush and not handle.awaiting_wal_sync
        # Each ran once: the maintainer's later turns on the unwritten shard are not counted.
        time.sleep(0.2)
        assert (_upkeep_count("wal_sync"), _upkeep_count("flush")) == (syncs_before + 1, flushes_before + 1)
    finally:
        maintainer.stop()
        handle.close()


def test_a_closed_shard_refuses_new_calls_after_the_running_ones(tmp_path: Path) -> None:
    handle = ShardHandle("s", _shard(tmp_path / "s"))
    entered, release = threading.Event(), threading.Event()

    def long_call() -> None:
        with handle.use():
            entered.set()
            release.wait(10)

    caller = threading.Thread(target=long_call)
    caller.start()
    entered.wait(10)
    closer = threading.Thread(target=handle.close)
    closer.start()
    time.sleep(0.1)
    assert closer.is_alive()  # waits for the call in flight
    release.set()
    closer.join(10)
    caller.join(10)
    with pytest.raises(ShardClosedError), handle.use():
        pass


def test_threads_share_the_index_while_kbs_come_and_go(settings: QdrantSettings) -> None:
    index = EdgeIndex(settings.model_copy(update={"optimize_after_points": 300, "flush_interval_s": 0.2}))
    index.create_kb(KB, DIM)
    index.upsert(KB, _points(KB, "seed", 100))
    errors: list[BaseException] = []
    stop = threading.Event()

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                while not stop.is_set():
                    work()
            except BaseException as exc:  # the test reports whatever a thread hit
                errors.append(exc)

        return run

    written = iter(range(10**6))

    def write() -> None:
        index.upsert(KB, _points(KB, f"w{next(written)}", 25))

    def churn() -> None:
        index.create_kb("c0c1", DIM)
        index.upsert("c0c1", _points("c0c1", "x", 10))
        index.drop_kb("c0c1")

    def search_churning_kb() -> None:
        # Dropped between calls: NotFound is the answer a caller gets for a KB that is gone.
        with contextlib.suppress(NotFound):
            _search(index, "c0c1")

    def search() -> None:
        _search(index, KB)

    workers = [guarded(search) for _ in range(3)]
    workers += [guarded(write), guarded(churn), guarded(search_churning_kb)]
    threads = [threading.Thread(target=work) for work in workers]
    for thread in threads:
        thread.start()
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join(60)
    try:
        assert errors == []
        assert index.count(KB) == 100 + 25 * next(written)
    finally:
        index.close()


def test_edge_refuses_a_cluster_layout_and_accepts_its_own(tmp_path: Path) -> None:
    """Embedded: one shard, one copy. Asking for more is an error that names why, and creates nothing."""
    index = EdgeIndex(QdrantSettings(path=tmp_path / "index"))
    try:
        with pytest.raises(InvalidInput, match="Qdrant Edge"):
            index.create_kb("kb1", dense_size=4, layout=KbIndexLayout(replication_factor=2))
        assert not index.kb_exists("kb1")
        index.create_kb("kb1", dense_size=4, layout=KbIndexLayout(shard_number=1, replication_factor=1))
        assert index.kb_exists("kb1")
    finally:
        index.close()


def _loads_elsewhere(shard_dir: Path) -> bool:
    """Whether the shard can be opened again: Edge refuses a second EdgeShard on a directory (its WAL lock)."""
    try:
        EdgeShard.load(str(shard_dir)).close()
    except Exception:  # Edge raises a plain RuntimeError-like error on the lock
        return False
    return True


def test_warm_up_opens_every_live_shard_and_skips_what_is_gone(settings: QdrantSettings) -> None:
    written = EdgeIndex(settings)
    for kb_id in ("a0b1", "c2d3", "e4f5"):
        written.create_kb(kb_id, DIM)
    written.upsert("a0b1", _points("a0b1", "d", 3))
    written.upsert("c2d3", _points("c2d3", "d", 2))
    written.drop_kb("e4f5")
    before = _search(written, "a0b1")
    written.close()
    (settings.path / "notes.alias").write_text("not an alias")  # a stray file beside the aliases

    index = EdgeIndex(settings)
    try:
        live = settings.path / ids.collection_name("a0b1", 1)
        assert _loads_elsewhere(live)  # closed and reopened: nothing is open until a call needs it
        assert index.warm_up() == 2  # the empty-handed c2d3 too; e4f5 was dropped
        assert not _loads_elsewhere(live)
        assert not _loads_elsewhere(settings.path / ids.collection_name("c2d3", 1))
        assert _search(index, "a0b1") == before
    finally:
        index.close()


def test_warm_up_leaves_a_kb_that_cannot_load_to_its_first_call(
    settings: QdrantSettings, caplog: pytest.LogCaptureFixture
) -> None:
    written = EdgeIndex(settings)
    for kb_id in ("a0b1", "c2d3"):
        written.create_kb(kb_id, DIM)
        written.upsert(kb_id, _points(kb_id, "d", 2))
    written.close()
    # c2d3's alias names a collection that is not on disk: loading it fails.
    (settings.path / f"{ids.alias_name('c2d3')}.alias").write_text(ids.collection_name("c2d3", 7))

    index = EdgeIndex(settings)
    try:
        assert index.warm_up() == 1
        assert "could not warm up the index of knowledge base c2d3" in caplog.text
        assert _search(index, "a0b1") > 0
    finally:
        index.close()
