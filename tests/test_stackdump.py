"""A service asked where it is (``quire.stackdump``): ``SIGUSR1`` writes
every thread's stack, ``SIGUSR2`` every asyncio task's coroutine stack, to
its log, and it goes on. What the stack supervisor asks of a service that
never became healthy."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from quire.stackdump import STACK_DUMP_SIGNAL, TASK_DUMP_SIGNAL

SERVICE = """
import asyncio
from quire.runtime import run_service

async def waiting_for_a_reply_that_never_comes():
    print("started", flush=True)
    await asyncio.sleep(120)

run_service("probe", waiting_for_a_reply_that_never_comes)
"""


def _until_logged(log: Path, text: str, timeout: float = 20.0) -> str:
    """The log once ``text`` is in it and the writing that brought it has
    ended (a dump is written line by line: its first line is no sign that
    the rest is there)."""
    deadline = time.monotonic() + timeout
    while text not in (written := log.read_text()):
        assert time.monotonic() < deadline, f"{text!r} never logged: {written!r}"
        time.sleep(0.05)
    while True:
        time.sleep(0.2)
        settled = log.read_text()
        if settled == written or time.monotonic() >= deadline:
            return settled
        written = settled


def test_a_service_writes_its_threads_and_its_tasks_when_asked_and_goes_on(
    tmp_path: Path,
) -> None:
    log = tmp_path / "probe.log"
    with log.open("wb") as output:
        service = subprocess.Popen(
            [sys.executable, "-c", SERVICE], stdout=output, stderr=subprocess.STDOUT
        )
    try:
        _until_logged(log, "started")
        service.send_signal(STACK_DUMP_SIGNAL)
        threads = _until_logged(log, "Current thread")
        assert "run_service" in threads, "the main thread's stack, down to the service's run"
        service.send_signal(TASK_DUMP_SIGNAL)
        tasks = _until_logged(log, "awaiting")
        assert "in waiting_for_a_reply_that_never_comes" in tasks, (
            "the coroutine the loop waits in, named: what a thread dump cannot show"
        )
        assert "in sleep" in tasks, "down to the await it is stuck in"
        assert service.poll() is None, "and it goes on"
    finally:
        service.send_signal(signal.SIGKILL)
        service.wait()
