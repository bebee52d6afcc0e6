"""A packet's new inline sources are fsync'd at once, not one after another,
and a failing one is raised only once every other has ended."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from quire.admission.uploads.inlinesources import finish_at_once
from quire.datakeys import DataKeys
from quire.errors import TransientError
from quire.localblobs import LocalBlobStore
from quire.testing.sealedstore import made_up_ring


class _Writer:
    """A blob writer whose finish (seal, flush, fsync) waits at a barrier."""

    def __init__(self, barrier: threading.Barrier | None, fails: bool = False) -> None:
        self._barrier = barrier
        self._fails = fails
        self.finished_on: str | None = None
        self.ended_at = 0.0

    def finish(self) -> None:
        try:
            if self._barrier is not None:
                self._barrier.wait(timeout=5)
            if self._fails:
                raise OSError("disk full")
            self.finished_on = threading.current_thread().name
        finally:
            self.ended_at = time.monotonic()


@pytest.fixture
def threads() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="sync") as pool:
        yield pool


def test_every_new_source_is_fsynced_at_the_same_time(threads: ThreadPoolExecutor) -> None:
    barrier = threading.Barrier(3)
    writers = [_Writer(barrier) for _ in range(3)]
    # One after another, the first would wait at the barrier for the others
    # and break it.
    finish_at_once(writers, threads)  # type: ignore[arg-type]
    assert writers[0].finished_on == threading.current_thread().name
    assert all(w.finished_on and w.finished_on.startswith("sync") for w in writers[1:])


def test_a_lone_source_is_fsynced_on_its_own_thread(threads: ThreadPoolExecutor) -> None:
    writer = _Writer(None)
    finish_at_once([writer], threads)  # type: ignore[list-item]
    assert writer.finished_on == threading.current_thread().name


def test_a_failing_source_is_raised_once_the_others_have_ended(
    threads: ThreadPoolExecutor,
) -> None:
    barrier = threading.Barrier(3)
    slow = _Writer(barrier)
    writers = [_Writer(barrier), _Writer(barrier, fails=True), slow]
    original = slow.finish

    def finish_late() -> None:
        original()
        time.sleep(0.2)

    slow.finish = finish_late  # type: ignore[method-assign]
    with pytest.raises(OSError, match="disk full"):
        finish_at_once(writers, threads)  # type: ignore[arg-type]
    raised_at = time.monotonic()
    assert slow.finished_on is not None
    assert raised_at - slow.ended_at >= 0.15, "raised before the slow fsync ended"


def test_a_source_whose_fsync_fails_leaves_no_blob_and_no_temporary_file(
    tmp_path: Path, threads: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path / "blobs", DataKeys(tmp_path / "blobs", made_up_ring()))
    real_fsync = os.fsync
    failing: set[int] = set()

    def fsync(fd: int) -> None:
        if fd in failing:
            raise OSError(errno.ENOSPC, "no space left on device")
        real_fsync(fd)

    monkeypatch.setattr("quire.blobstore.os.fsync", fsync)
    with pytest.raises(TransientError), contextlib.ExitStack() as cleanup:
        writers = [cleanup.enter_context(store.writer("tenant-a")) for _ in range(3)]
        for index, writer in enumerate(writers):
            writer.write(f"%PDF-1.7 source {index}".encode() * 100)
        failing.add(writers[1]._file.fileno())  # noqa: SLF001 - the second source's file
        finish_at_once(writers, threads)
        for index, writer in enumerate(writers):  # never reached: nothing is promoted
            writer.promote(f"sources/tenant-a/{index}")
    assert store.list_keys("sources/") == []
    assert [path for path in store.tmp_dir.rglob("*") if path.is_file()] == []
