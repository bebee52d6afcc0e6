"""Progress on long operations (uploads, waits), drawn with ``rich`` on stderr.

Only when stderr is a terminal and the result is not ``--json``: stdout
stays the result alone, and a pipe or a log file never gets escape codes.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Protocol

__all__ = [
    "BatchProgress",
    "Progress",
    "batch_progress",
    "progress_wanted",
    "upload_progress",
    "waiting",
]


class Progress(Protocol):
    def advance(self, amount: int) -> None: ...


class BatchProgress(Protocol):
    def show(self, ended: int, total: int, summary: str) -> None: ...


class _Silent:
    def advance(self, amount: int) -> None:
        pass

    def show(self, ended: int, total: int, summary: str) -> None:
        pass


class _Bar:
    def __init__(self, progress: object, task: object) -> None:
        self._progress = progress
        self._task = task

    def advance(self, amount: int) -> None:
        self._progress.advance(self._task, amount)  # type: ignore[attr-defined]


def progress_wanted(as_json: bool) -> bool:
    """Draw progress? Never with ``--json``, never when stderr is not a terminal."""
    return not as_json and sys.stderr.isatty()


@contextlib.contextmanager
def upload_progress(total_bytes: int, files: int, *, enabled: bool) -> Iterator[Progress]:
    """A bar over the packet's bytes; the caller advances it file by file."""
    if not enabled:
        yield _Silent()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import Progress as RichProgress

    columns = (
        TextColumn("uploading {task.fields[files]} sources"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("upload", total=total_bytes, files=files)
        yield _Bar(progress, task)


@contextlib.contextmanager
def waiting(what: str, *, enabled: bool) -> Iterator[None]:
    """A spinner with the time spent while waiting for ``what``."""
    if not enabled:
        yield
        return
    from rich.console import Console
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn(f"waiting for {what}"), TimeElapsedColumn())
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as progress:
        progress.add_task("wait", total=None)
        yield


class _BatchBar:
    def __init__(self, progress: object, task: object) -> None:
        self._progress = progress
        self._task = task

    def show(self, ended: int, total: int, summary: str) -> None:
        self._progress.update(  # type: ignore[attr-defined]
            self._task, completed=ended, total=total, summary=summary
        )


@contextlib.contextmanager
def batch_progress(name: str, *, enabled: bool) -> Iterator[BatchProgress]:
    """A bar over a batch's ended jobs; nothing at all when not ``enabled``
    (``progress_wanted``: a pipe or a log gets the result and nothing else)."""
    if not enabled:
        yield _Silent()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    columns = (
        TextColumn(name),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[summary]}"),
        TimeElapsedColumn(),
    )
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("batch", total=None, summary="")
        yield _BatchBar(progress, task)
