"""Every blob backend keeps the same promises: content bound to digests and
checked on every read, atomic and exclusive promotion (one winner however
many replicas race), bounded memory for a 25 MiB source, nothing left in
the temporary space, and one set of data keys for every replica.

Each test runs against the local directory and the NATS JetStream object
store (a real nats-server), through the ``BlobStore`` port.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from quire.blobstore import BlobStore, SealedBlobStore
from quire.datakeys import DataKeys
from quire.errors import FailedPrecondition, InvalidSetting, PermanentError
from quire.kek import KekRing
from quire.localblobs import LocalBlobStore
from quire.natsblobs import BLOB_BUCKET, STREAM, NatsBlobStore, ensure_blob_buckets
from quire.natsport import NatsPort
from quire.reasons import ReasonCode
from quire.runtime import connect_nats
from quire.settings import ServiceSettings
from quire.stack.natsserver import NatsServer
from quire.testing.sealedstore import made_up_ring

MIB = 1024 * 1024
BACKENDS = ["local", "nats"]

Replica = Callable[[], SealedBlobStore]
"""Opens one more store on the same backend (another replica's view)."""


def _nats_replica(url: str, ring: KekRing, tmp: Path) -> NatsBlobStore:
    port = NatsPort(lambda: connect_nats(url, "quire-test-blobs"), name="test-blobs")
    port.run(ensure_blob_buckets, port.js, 1)
    return NatsBlobStore.open(port, ring, tmp)


@pytest.fixture(params=BACKENDS)
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Replica]:
    """A factory of stores that share one backend and one KEK ring; every
    store it made is closed afterwards."""
    ring = made_up_ring()
    opened: list[SealedBlobStore] = []
    counter = iter(range(1000))

    if request.param == "local":

        def open_store() -> SealedBlobStore:
            root = tmp_path / "blobs"
            store = LocalBlobStore(root, DataKeys(root, ring))
            opened.append(store)
            return store

    else:
        server: NatsServer = request.getfixturevalue("nats_server")

        def open_store() -> SealedBlobStore:
            # Each replica has its own temporary space on its own "disk".
            store = _nats_replica(server.url, ring, tmp_path / f"replica-{next(counter)}")
            opened.append(store)
            return store

    yield open_store
    for store in opened:
        store.close()


@pytest.fixture
def store(replicas: Replica) -> SealedBlobStore:
    return replicas()


def _put(store: BlobStore, key: str, data: bytes, *, exclusive: bool = False) -> bool:
    with store.writer(key.split("/")[1]) as writer:
        writer.write(data)
        return writer.promote(key, exclusive=exclusive)


def _temp_entries(store: BlobStore) -> list[Path]:
    return list(store.tmp_dir.iterdir())


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_promoted_blob_reads_back_verified(store: SealedBlobStore, tmp_path: Path) -> None:
    data = os.urandom(300_000)
    assert _put(store, "sources/t/a", data)
    assert store.exists("sources/t/a")
    assert b"".join(store.read_verified("sources/t/a", _sha(data), chunk=4096)) == data
    assert store.digest("sources/t/a") == (_sha(data), len(data))
    private = tmp_path / "attempt"
    private.mkdir()
    copy = store.materialize("sources/t/a", _sha(data), private)
    assert copy.read_bytes() == data
    assert _temp_entries(store) == []


def test_a_worker_output_is_sealed_and_promoted_and_the_plaintext_removed(
    store: SealedBlobStore,
) -> None:
    output = store.new_temp("packet")
    output.write_bytes(b"%PDF packet")
    assert store.promote_file(output, "assembled/t/p")
    assert not output.exists()
    assert b"".join(store.read_plain("assembled/t/p")) == b"%PDF packet"
    assert _temp_entries(store) == []


def test_a_missing_blob_is_source_missing(store: SealedBlobStore, tmp_path: Path) -> None:
    assert not store.exists("sources/t/none")
    with pytest.raises(PermanentError) as caught:
        b"".join(store.read_verified("sources/t/none", _sha(b"")))
    assert caught.value.reason is ReasonCode.SOURCE_MISSING
    with pytest.raises(PermanentError) as caught:
        store.materialize("sources/t/none", _sha(b""), tmp_path)
    assert caught.value.reason is ReasonCode.SOURCE_MISSING
    assert list(tmp_path.glob("plain-*")) == []
    assert _temp_entries(store) == []


def test_a_deleted_blob_is_gone_and_its_key_can_be_made_again(store: SealedBlobStore) -> None:
    assert _put(store, "signed/t/job.pdf", b"one", exclusive=True)
    store.delete("signed/t/job.pdf")
    store.delete("signed/t/job.pdf")  # deleting twice is fine
    assert not store.exists("signed/t/job.pdf")
    assert store.list_keys("signed/") == []
    assert _put(store, "signed/t/job.pdf", b"two", exclusive=True)
    assert b"".join(store.read_verified("signed/t/job.pdf", _sha(b"two"))) == b"two"


def test_a_second_promotion_of_a_key_replaces_on_disk_and_is_ignored_in_nats(
    store: SealedBlobStore,
) -> None:
    """Keys are content-addressed, so a second writer brings the same bytes.
    The local backend replaces the file (a damaged one heals); the NATS
    backend is create-only, so no service login can overwrite an object."""
    assert _put(store, "sources/t/r", b"first")
    assert _put(store, "sources/t/r", b"second")
    kept = b"second" if isinstance(store, LocalBlobStore) else b"first"
    assert b"".join(store.read_plain("sources/t/r")) == kept
    assert store.list_keys("sources/") == ["sources/t/r"]
    assert _temp_entries(store) == []


def _tamper(store: SealedBlobStore, key: str, stored: bytes) -> None:
    """Replace what is stored under ``key`` with ``stored``, consistently at
    the storage layer (a local file; a NATS object with a matching meta
    digest), so that only Quire's own checks can notice."""
    if isinstance(store, LocalBlobStore):
        store.local_path(key).write_bytes(stored)
        return
    assert isinstance(store, NatsBlobStore)

    async def forge() -> None:
        js = store._port.js  # noqa: SLF001 - the test plays an attacker with bucket access
        nuid = "forged" + os.urandom(8).hex()
        await js.publish(f"$O.{BLOB_BUCKET}.C.{nuid}", stored)
        subject = f"$O.{BLOB_BUCKET}.M.{base64.urlsafe_b64encode(key.encode()).decode()}"
        digest = base64.urlsafe_b64encode(hashlib.sha256(stored).digest()).decode()
        info = {"name": key, "bucket": BLOB_BUCKET, "nuid": nuid, "size": len(stored)}
        info |= {"chunks": 1, "digest": "SHA-256=" + digest}
        # The stream refuses rollups and readers take the first meta message:
        # only a login allowed to purge (the keeper's) could do this.
        await js.purge_stream(STREAM, subject=subject)
        await js.publish(subject, json.dumps(info).encode())

    store._port.run(forge)  # noqa: SLF001


@pytest.mark.parametrize("forgery", ["garbage", "another blob's sealed bytes"])
def test_stored_bytes_that_changed_fail_with_digest_mismatch(
    store: SealedBlobStore, forgery: str
) -> None:
    _put(store, "sources/t/one", b"original")
    _put(store, "sources/t/two", b"other document")
    stored = b"tampered"
    if forgery != "garbage":
        with store.open_sealed("sources/t/two") as handle:
            stored = handle.read()
    _tamper(store, "sources/t/one", stored)
    with pytest.raises(PermanentError) as caught:
        b"".join(store.read_verified("sources/t/one", _sha(b"original")))
    assert caught.value.reason is ReasonCode.DIGEST_MISMATCH
    assert _temp_entries(store) == []


def test_nats_a_lost_chunk_fails_with_digest_mismatch(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    store = _nats_replica(nats_server.url, made_up_ring(), tmp_path / "tmp")
    try:
        data = os.urandom(3 * 128 * 1024 + 5)
        _put(store, "sources/t/big", data)

        async def lose_second_chunk() -> None:
            js = store._port.js  # noqa: SLF001
            info = await js.stream_info(STREAM)
            await js.delete_msg(STREAM, info.state.first_seq + 1)

        store._port.run(lose_second_chunk)  # noqa: SLF001
        with pytest.raises(PermanentError) as caught:
            b"".join(store.read_verified("sources/t/big", _sha(data)))
        assert caught.value.reason is ReasonCode.DIGEST_MISMATCH
        assert _temp_entries(store) == []
    finally:
        store.close()


def test_of_many_replicas_promoting_one_key_exactly_one_wins(replicas: Replica) -> None:
    stores = [replicas() for _ in range(4)]
    writers = 16
    contents = [f"artifact from writer {i}".encode() * 1000 for i in range(writers)]
    start = threading.Barrier(writers)

    def promote(index: int) -> bool:
        store = stores[index % len(stores)]
        with store.writer("t") as writer:
            writer.write(contents[index])
            writer.finish()
            start.wait()
            return writer.promote("signed/t/job.pdf", exclusive=True)

    with ThreadPoolExecutor(writers) as pool:
        outcomes = list(pool.map(promote, range(writers)))
    assert outcomes.count(True) == 1
    winner = contents[outcomes.index(True)]
    for store in stores:
        assert b"".join(store.read_verified("signed/t/job.pdf", _sha(winner))) == winner
        assert _temp_entries(store) == []
    assert stores[0].list_keys("signed/") == ["signed/t/job.pdf"]


def test_a_25_mib_blob_streams_through_in_bounded_memory(store: SealedBlobStore) -> None:
    size, piece = 25 * MIB, 64 * 1024
    digest = hashlib.sha256()
    tracemalloc.start()
    try:
        with store.writer("t") as writer:
            for _ in range(size // piece):
                data = os.urandom(piece)
                digest.update(data)
                writer.write(data)
            assert writer.promote("sources/t/large")
        read = 0
        for data in store.read_verified("sources/t/large", digest.hexdigest()):
            read += len(data)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read == size
    assert peak < 5 * MIB, f"peak {peak / MIB:.1f} MiB traced while moving 25 MiB"
    assert _temp_entries(store) == []


def test_every_replica_uses_one_data_key_per_tenant(replicas: Replica) -> None:
    stores = [replicas() for _ in range(4)]
    with ThreadPoolExecutor(len(stores)) as pool:
        keys = list(pool.map(lambda s: s.keys.for_writing("fresh"), stores))
    assert len(set(keys)) == 1, "one data key won the race; every replica uses it"
    _put(stores[0], "sources/fresh/doc", b"sealed by one replica")
    assert b"".join(stores[1].read_plain("sources/fresh/doc")) == b"sealed by one replica"
    assert [entry["tenant"] for entry in stores[2].keys.status()] == ["fresh"]


def test_a_shred_by_one_replica_holds_for_every_replica(replicas: Replica) -> None:
    first, second = replicas(), replicas()
    _put(first, "sources/gone/doc", b"secret")
    assert b"".join(second.read_plain("sources/gone/doc")) == b"secret"
    assert first.keys.shred("gone") == 1
    with pytest.raises(FailedPrecondition) as caught:
        b"".join(second.read_plain("sources/gone/doc"))
    assert caught.value.reason is ReasonCode.DATA_SHREDDED
    with pytest.raises(FailedPrecondition):
        second.writer("gone")
    assert _temp_entries(second) == []


def test_a_misspelt_blob_backend_stops_the_process_at_start() -> None:
    with pytest.raises(InvalidSetting) as caught:
        ServiceSettings.from_env("assembler", {"QUIRE_BLOB_BACKEND": "s3ish"})
    assert caught.value.variable == "QUIRE_BLOB_BACKEND"
    assert caught.value.message == "QUIRE_BLOB_BACKEND: local or nats"
    assert ServiceSettings.from_env("assembler", {}).blob_backend == "local"


def test_nats_the_sweep_purges_only_old_chunks_no_object_names(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """An upload that failed before its meta message leaves chunks no reader
    knows of; the keeper's sweep purges them once old enough, and leaves a
    live object's chunks (and a fresh orphan, maybe an upload in progress)."""
    store = _nats_replica(nats_server.url, made_up_ring(), tmp_path / "tmp")
    try:
        data = os.urandom(200 * 1024)
        _put(store, "sources/t/kept", data)

        async def orphan(nuid: str) -> None:
            await store._port.js.publish(f"$O.{BLOB_BUCKET}.C.{nuid}", b"left behind")  # noqa: SLF001

        store._port.run(orphan, "orphan" + os.urandom(8).hex())  # noqa: SLF001
        assert store.sweep_orphaned_chunks(3600) == 0, "too fresh to sweep"
        assert store.sweep_orphaned_chunks(0) == 1
        assert store.sweep_orphaned_chunks(0) == 0
        assert b"".join(store.read_plain("sources/t/kept")) == data
    finally:
        store.close()


def test_blobs_kept_together_are_made_durable_at_once(store: SealedBlobStore) -> None:
    """One job's sources promoted without a directory sync each, then synced
    together, read back as if each had been synced on its own."""
    data = {f"sources/t/{n}": os.urandom(1000 + n) for n in range(3)}
    for key, body in data.items():
        with store.writer("t") as writer:
            writer.write(body)
            assert writer.promote(key, sync_directory=False)
    store.sync_directories(list(data))
    for key, body in data.items():
        assert b"".join(store.read_verified(key, _sha(body))) == body
    assert _temp_entries(store) == []
