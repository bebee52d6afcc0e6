"""Blob store: bytes bound to digests, atomic promotion, nothing left behind."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from quire.errors import InvalidInput, PermanentError
from quire.reasons import ReasonCode
from quire.testing.sealedstore import sealed_store


def test_promoted_blob_is_readable_and_verified(tmp_path: Path) -> None:
    store = sealed_store(tmp_path)
    with store.writer("t") as writer:
        writer.write(b"hello ")
        writer.write(b"world")
        writer.promote("sources/t/abc")
    digest = hashlib.sha256(b"hello world").hexdigest()
    assert b"".join(store.read_verified("sources/t/abc", digest, chunk=4)) == b"hello world"
    assert list(store.tmp_dir.iterdir()) == []


def test_reading_a_blob_whose_bytes_changed_fails_with_digest_mismatch(tmp_path: Path) -> None:
    store = sealed_store(tmp_path)
    with store.writer("t") as writer:
        writer.write(b"original")
        writer.promote("sources/t/one")
    store.local_path("sources/t/one").write_bytes(b"tampered")
    with pytest.raises(PermanentError) as caught:
        b"".join(store.read_verified("sources/t/one", hashlib.sha256(b"original").hexdigest()))
    assert caught.value.reason is ReasonCode.DIGEST_MISMATCH


def test_writer_stops_at_first_byte_past_the_limit_and_leaves_no_file(tmp_path: Path) -> None:
    store = sealed_store(tmp_path)
    with pytest.raises(InvalidInput) as caught, store.writer("t", max_bytes=4) as writer:
        writer.write(b"abcd")
        writer.write(b"e")
    assert caught.value.reason is ReasonCode.SIZE_EXCEEDS_DECLARATION
    assert list(store.tmp_dir.iterdir()) == []


def test_exclusive_promotion_never_replaces_an_existing_blob(tmp_path: Path) -> None:
    store = sealed_store(tmp_path)
    with store.writer("t") as first:
        first.write(b"first")
        assert first.promote("signed/t/job.pdf", exclusive=True)
    with store.writer("t") as second:
        second.write(b"second")
        assert not second.promote("signed/t/job.pdf", exclusive=True)
    first_digest = hashlib.sha256(b"first").hexdigest()
    assert b"".join(store.read_verified("signed/t/job.pdf", first_digest)) == b"first"
    assert list(store.tmp_dir.iterdir()) == []


@pytest.mark.parametrize(
    "key", ["../escape", "/abs/path", ".tmp/x", "a/../../b", ".keyring/t/v1.key"]
)
def test_keys_cannot_leave_the_store(tmp_path: Path, key: str) -> None:
    with pytest.raises(PermanentError):
        sealed_store(tmp_path).local_path(key)


def test_blobs_promoted_together_fsync_their_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each promotion alone fsyncs its directory; promoted together (one
    job's sources), the directory is fsynced once, after the last."""
    import quire.localblobs

    synced: list[Path] = []
    real = quire.localblobs.fsync_dir
    monkeypatch.setattr(
        quire.localblobs, "fsync_dir", lambda path: (synced.append(path), real(path))
    )
    store = sealed_store(tmp_path)

    def put(key: str, **kwargs: bool) -> None:
        with store.writer("t") as writer:
            writer.write(key.encode())
            writer.promote(key, **kwargs)

    for n in range(3):
        put(f"sources/t/alone-{n}")
    assert len(synced) == 3
    synced.clear()
    keys = [f"sources/t/together-{n}" for n in range(3)]
    for key in keys:
        put(key, sync_directory=False)
    assert synced == [], "nothing synced before the caller asks"
    store.sync_directories(keys)
    assert synced == [store.local_path(keys[0]).parent]
