"""A packet's new inline sources are fsync'd at once, not one after another,
and a failing one is raised only once every other has ended."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from quire.admission.uploads.inlinesources import finish_at_once


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
