"""The embedded stack supervises its nats-server (issue 21).

On a private stack, jobs are submitted one after another while nats-server
is SIGKILLed in the middle (no one calls ``start``): the stack's watcher
starts it again on the same port and store, every service reconnects and
resumes without being restarted itself, every accepted job ends COMPLETED
with exactly one completion in the ledger, and ``quire check`` finds
nothing. Unit tests: the restart backoff, ``Stack.kill/pid/restarts("nats")``
on a stand-in server, and that ``quire up`` runs a stack that supervises
nats-server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest
from test_faults_common import eventually, ledger_rows, running_stack, wait_all

from quire.client import AdmissionClient, PacketItem
from quire.invariants import check
from quire.jobs import state_name
from quire.settings import SERVICES
from quire.stack import supervisor
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf

JOBS = 16
SUBMIT_EVERY_SECONDS = 0.15
KILL_AFTER_SUBMITTED = 6
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
SUBMIT_DEADLINE_SECONDS = 60.0
RESTART_WITHIN_SECONDS = 10.0
NATS = "nats"  # supervisor.NATS; spelt out so that this file loads on a stack without it


async def _submit_retrying(client: AdmissionClient, path: Path, index: int) -> str:
    """Upload and submit one job, retrying refusals a NATS outage may cause
    (the same request id each time, so a retry is never a second job)."""
    request_id = uuid.uuid4().hex
    deadline = time.monotonic() + SUBMIT_DEADLINE_SECONDS
    while True:
        try:
            digest = (await client.upload(path)).sha256
            job = await client.submit([PacketItem(f"d{index}", digest)], request_id=request_id)
            return job.name
        except grpc.aio.AioRpcError as error:
            if error.code() not in RETRYABLE or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


@pytest.mark.stack
@pytest.mark.fault
async def test_nats_killed_under_load_is_restarted_and_every_job_completes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    paths = [
        write_text_pdf(folder / f"{index}.pdf", [f"page {index} {uuid.uuid4().hex}"])
        for index in range(JOBS)
    ]
    async with running_stack(tmp_path / "stack", env={"QUIRE_ACK_WAIT_SECONDS": "3"}) as running:
        stack = running.stack
        nats = stack.nats
        assert nats is not None
        port, first_pid = nats.port, nats.pid
        assert first_pid is not None
        names: list[str] = []
        submitted_during_outage = 0

        async def submit_stream() -> None:
            nonlocal submitted_during_outage
            for index, path in enumerate(paths):
                down = not nats.alive
                names.append(await _submit_retrying(running.client, path, index))
                submitted_during_outage += down
                await asyncio.sleep(SUBMIT_EVERY_SECONDS)

        in_flight: set[str] = set()

        async def under_way() -> bool:
            # Enough submitted, and some of them not yet complete: on a busy
            # machine submitting can be slower than the pipeline.
            nonlocal in_flight
            if len(names) < KILL_AFTER_SUBMITTED:
                return False
            completed = {r[2] for r in ledger_rows(running.data_dir) if r[3] == "COMPLETED"}
            in_flight = set(names) - completed
            return bool(in_flight)

        submitter = asyncio.create_task(submit_stream())
        try:
            await eventually(under_way, 60, "jobs submitted, some still in flight", every=0.02)
            # SIGKILL from outside, as a crash would; nobody starts it again by hand.
            os.kill(first_pid, signal.SIGKILL)
            killed_at = time.monotonic()

            async def restarted() -> bool:
                return nats.alive and nats.pid != first_pid

            await eventually(restarted, RESTART_WITHIN_SECONDS, "nats-server restarted")
            restart_seconds = time.monotonic() - killed_at
            await submitter
        finally:
            submitter.cancel()
        assert len(names) == JOBS
        assert stack.supervises_nats
        assert nats.port == port and stack.pid(NATS) == nats.pid != first_pid
        assert stack.restarts(NATS) == 1
        assert in_flight, "the outage must hit jobs still in flight"

        jobs = await wait_all(running.client, names, timeout=90, through_unavailable=True)
        assert {name: state_name(job.state) for name, job in jobs.items()} == {
            name: "COMPLETED" for name in names
        }
        rows = ledger_rows(running.data_dir)
        completions = Counter(job for _seq, _id, job, state in rows if state == "COMPLETED")
        assert completions == Counter(names), "exactly one COMPLETED entry per job"
        # The services reconnected: none of them was restarted for it.
        assert {service: stack.restarts(service) for service in SERVICES} == dict.fromkeys(
            SERVICES, 0
        )
        assert stack.restarts(NATS) == 1
    print(
        f"nats-server back after {restart_seconds:.2f} s; "
        f"{submitted_during_outage} submitted while it was down"
    )
    report = check(running.data_dir)
    assert report.stopped and report.findings == [], report.findings
    assert dict(report.jobs_by_state) == {"COMPLETED": JOBS}


def test_restart_delay_is_immediate_then_doubling_and_bounded() -> None:
    assert supervisor.NATS == NATS
    delays = [supervisor.nats_restart_delay(failures) for failures in range(1, 12)]
    assert delays[0] == 0.0
    assert delays[1:4] == [0.5, 1.0, 2.0]
    assert max(delays) == supervisor.NATS_BACKOFF_CAP_SECONDS == delays[-1]
    assert delays == sorted(delays)


class _FakeNats:
    """A stand-in for ``NatsServer``: no process, counts its starts."""

    def __init__(self) -> None:
        self.alive = True
        self.pid: int | None = 100
        self.port = 4222
        self.starts = 0

    def start(self, *, wait: bool = True) -> bool:
        assert not wait, "the watcher must not block on a restart"
        if self.alive:
            return False
        self.alive = True
        self.starts += 1
        self.pid = 100 + self.starts
        return True

    def kill(self) -> None:
        self.alive = False

    def stop(self) -> None:
        self.alive = False


def _stack_with_fake_nats(tmp_path: Path) -> tuple[Stack, _FakeNats]:
    stack = Stack(tmp_path / "stack")
    fake = _FakeNats()
    stack.nats = fake  # type: ignore[assignment]
    return stack, fake


def test_watcher_restarts_nats_with_backoff_and_counts_it(tmp_path: Path) -> None:
    stack, fake = _stack_with_fake_nats(tmp_path)
    now = time.monotonic() + supervisor.NATS_STABLE_SECONDS
    stack.watch_nats(now)
    assert fake.starts == 0 and stack.restarts(NATS) == 0, "a running server is left alone"

    stack.kill(NATS)  # after a long, stable run: restarted at once
    stack.watch_nats(now)
    assert fake.alive and stack.restarts(NATS) == 1 and stack.pid(NATS) == 101

    # It dies again at once, twice: the second restart waits half a second,
    # the third one second.
    for restart, delay in ((2, 0.5), (3, 1.0)):
        stack.kill(NATS)
        stack.watch_nats(now)
        assert not fake.alive and stack.restarts(NATS) == restart - 1
        stack.watch_nats(now + delay - 0.01)
        assert not fake.alive
        now += delay
        stack.watch_nats(now)
        assert fake.alive and stack.restarts(NATS) == restart

    # Up long enough again: the next death is restarted at once.
    now += supervisor.NATS_STABLE_SECONDS
    stack.kill(NATS)
    stack.watch_nats(now)
    assert fake.alive and stack.restarts(NATS) == 4


def test_watcher_counts_only_its_own_starts_and_stops_with_the_stack(tmp_path: Path) -> None:
    stack, fake = _stack_with_fake_nats(tmp_path)
    now = time.monotonic() + supervisor.NATS_STABLE_SECONDS
    stack.kill(NATS)
    stack.watch_nats(now)
    assert stack.restarts(NATS) == 1
    stack.kill(NATS)
    stack.watch_nats(now)  # died again at once: restarted after a pause
    fake.alive = True  # meanwhile someone started it (a test calling NatsServer.start)
    stack.watch_nats(now + 1.0)
    assert stack.restarts(NATS) == 1 and fake.starts == 1
    now += 1.0 + supervisor.NATS_STABLE_SECONDS  # up that long since that start
    stack.kill(NATS)
    stack.watch_nats(now)  # a fresh death, restarted at once
    assert stack.restarts(NATS) == 2 and fake.alive
    stack.stop()
    stack.watch_nats(now)
    assert not fake.alive and fake.starts == 2, "a stopping stack starts nothing"


def test_a_stack_on_external_nats_supervises_none(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "stack", nats_url="nats://127.0.0.1:1")
    assert not stack.supervises_nats
    with pytest.raises(ValueError):
        stack.restarts(NATS)
    assert not Stack(tmp_path / "other", restart=False).supervises_nats


class _Started(Exception):
    pass


class _Output:
    def note(self, text: str) -> None:
        pass

    line = note

    def emit(self, document: Any) -> None:
        pass


def test_quire_up_runs_a_stack_that_supervises_nats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from quire.cli import up

    made: list[Stack] = []

    class Recording(Stack):
        def start(self) -> Any:
            made.append(self)
            raise _Started

    monkeypatch.delenv("QUIRE_NATS_URL", raising=False)
    monkeypatch.setattr(up, "Stack", Recording)
    monkeypatch.setattr(up.signal, "signal", lambda *_: None)
    args = argparse.Namespace(data_dir=str(tmp_path / "stack"), example=None)
    with pytest.raises(_Started):
        up.run(args, _Output())  # type: ignore[arg-type]
    (stack,) = made
    assert stack.supervises_nats
