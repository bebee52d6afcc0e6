"""A lease that expires while its worker is still busy, on the real stack.

The stack's validator (A) takes a job and goes into its sandbox; its sandbox
processes are frozen (SIGSTOP), so the work cannot finish, and then A itself
is frozen, so its ``in_progress`` heartbeats stop. The ack wait lapses, and a
second validator process (B), started beside it on the same database, blob
store and NATS, gets the redelivery, takes a newer lease token, commits and
hands the job on; the job completes. Then A is thawed: its work finishes, its
compare-and-swap commit is refused (its span says ``quire.stale``), and it
publishes nothing — no task, no event. The invariant checker finds nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg
from test_faults_common import eventually, ledger_rows, running_stack

from quire.client import PacketItem
from quire.invariants import check
from quire.jobs import job_id, state_name
from quire.runtime import connect_nats
from quire.settings import service_address_var, service_health_var, service_metrics_var
from quire.stack.ports import free_port
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf
from quire.type import queue_pb2
from quire.workqueue import WORK_STREAM, consumer_name, is_event_batch

pytestmark = [pytest.mark.stack, pytest.mark.fault]

ACK_WAIT_SECONDS = 2


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the sandbox's forkserver, workers, tracker)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _validator_lease(data_dir: Path, job: str) -> tuple[int, bool] | None:
    """(token, committed) of the job's lease row in the validator's database."""
    path = data_dir / "validator" / "validator.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        row = db.execute(
            "SELECT token, outcome IS NOT NULL FROM stage_leases WHERE job = ?", (job,)
        ).fetchone()
    return None if row is None else (int(row[0]), bool(row[1]))


def _lease_token(data_dir: Path, service: str, job: str) -> int:
    path = data_dir / service / f"{service}.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        (token,) = db.execute("SELECT token FROM stage_leases WHERE job = ?", (job,)).fetchone()
    return int(token)


def _stale_spans(trace_file: Path, job: str) -> list[dict[str, Any]]:
    """The validator's spans for ``job`` whose commit was refused."""
    if not trace_file.exists():
        return []
    spans = [json.loads(line) for line in trace_file.read_text().splitlines() if line]
    return [
        span
        for span in spans
        if span["name"] == "validator.process"
        and span["attributes"].get("quire.job") == job_id(job)
        and span["attributes"].get("quire.stale")
    ]


async def _pulling(stack: Stack) -> None:
    """Wait until the validator asks for work: its sandbox is warm by then.

    (The stack's health check passes earlier: see the report on grpcserver.)
    """
    nc = await connect_nats(stack.nats_url, "quire-test-probe", **stack.nats_login())
    try:
        js = nc.jetstream(timeout=10)

        async def waiting() -> bool:
            info = await js.consumer_info(WORK_STREAM, consumer_name("validate", "interactive"))
            return bool(info.num_waiting)

        await eventually(waiting, 30, "the validator pulls work")
    finally:
        await nc.close()


def _second_validator(stack: Stack) -> subprocess.Popen[bytes]:
    """Validator B: the same stack, its own gRPC, health and metrics ports
    (a port is one server's alone) and its own sandbox."""
    env = stack.service_env()
    env[service_address_var("validator")] = f"127.0.0.1:{free_port()}"
    env[service_health_var("validator")] = f"127.0.0.1:{free_port()}"
    env[service_metrics_var("validator")] = f"127.0.0.1:{free_port()}"
    log = open(stack.data_dir / "logs" / "validator-b.log", "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "quire.validator.main"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()


async def test_a_worker_whose_lease_expired_commits_and_publishes_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "stack"
    trace_file = data_dir / "traces.jsonl"
    env = {
        "QUIRE_ACK_WAIT_SECONDS": str(ACK_WAIT_SECONDS),
        # The frozen sandbox must not time out: A's work really finishes late.
        "QUIRE_VALIDATOR_SANDBOX_WALL_SECONDS": "300",
        "QUIRE_TRACE_FILE": str(trace_file),
    }
    async with running_stack(data_dir, env=env) as running:
        stack = running.stack
        await _pulling(stack)
        validator_a = stack.pid("validator")
        sandbox_a = _descendants(validator_a)
        assert sandbox_a, "the validator's sandbox processes are running"
        frozen = [*sandbox_a, validator_a]
        validator_b: subprocess.Popen[bytes] | None = None
        try:
            _signal_all(sandbox_a, signal.SIGSTOP)
            path = write_text_pdf(tmp_path / "slow.pdf", ["held up in the sandbox"])
            digest = (await running.client.upload(path)).sha256
            job = (await running.client.submit([PacketItem("s", digest)])).name

            async def a_is_working() -> bool:
                leased = _validator_lease(data_dir, job) == (1, False)
                announced = any(r[2] == job and r[3] == "VALIDATING" for r in ledger_rows(data_dir))
                return leased and announced

            await eventually(a_is_working, 30, "validator A took the job")
            await asyncio.sleep(0.3)  # from the announcement into the sandbox call
            _signal_all([validator_a], signal.SIGSTOP)  # no more heartbeats
            validator_b = _second_validator(stack)

            done = await running.client.wait(job, timeout=60)
            assert state_name(done.state) == "COMPLETED"
            lease = _validator_lease(data_dir, job)
            assert lease is not None and lease[0] >= 2 and lease[1], "B's newer token committed"
            validator_b.terminate()
            await asyncio.to_thread(validator_b.wait, 30)

            assembler_token = _lease_token(data_dir, "assembler", job)
            nc = await connect_nats(stack.nats_url, "quire-test-stale", **stack.nats_login())
            published: list[Msg] = []

            async def record(msg: Msg) -> None:
                published.append(msg)

            try:
                await nc.subscribe("quire.work.>", cb=record)
                await nc.subscribe("quire.events.>", cb=record)
                await nc.flush()
                _signal_all([validator_a, *sandbox_a], signal.SIGCONT)
                frozen = []

                async def a_was_refused() -> bool:
                    return bool(_stale_spans(trace_file, job))

                await eventually(a_was_refused, 30, "validator A finished its stale work")
                await asyncio.sleep(1.0)  # anything A published would have arrived
                await nc.flush()
            finally:
                await nc.close()
            (stale,) = _stale_spans(trace_file, job)
            assert stale["attributes"]["quire.lease_token"] == 1
            # A's later delivery (taken while it was frozen) may find B's committed
            # outcome and republish it under the same message ids: JetStream drops
            # those. The stale attempt itself must have sent nothing.
            # Each message names the span that sent it (a PRODUCER span); that
            # span's parent is the delivery that published it.
            senders = {(m.headers or {}).get("traceparent", "").split("-")[2] for m in published}

            def spans() -> list[dict[str, Any]]:
                return [json.loads(line) for line in trace_file.read_text().splitlines() if line]

            async def sends_exported() -> bool:
                return senders <= {span["span_id"] for span in spans()}

            await eventually(sends_exported, 30, "every send's span exported")
            publishers = {span["parent_id"] for span in spans() if span["span_id"] in senders}
            assert stale["span_id"] not in senders | publishers, (
                "the stale worker published nothing"
            )
            for message in published:
                if message.subject.startswith("quire.events."):
                    events = (
                        queue_pb2.EventBatch.FromString(message.data).events
                        if is_event_batch(message.subject)
                        else [queue_pb2.TransitionEvent.FromString(message.data)]
                    )
                    for event in events:
                        assert event.lease_token != 1, "no event of the stale attempt"
            assert _lease_token(data_dir, "assembler", job) == assembler_token, (
                "no second assemble task was delivered"
            )
            assert stack.restarts("validator") == 0
        finally:
            _signal_all(frozen, signal.SIGCONT)
            if validator_b is not None and validator_b.poll() is None:
                validator_b.kill()
                validator_b.wait()

        rows = sqlite3.connect(f"file:{data_dir / 'audit' / 'audit.db'}?mode=ro", uri=True)
        with rows:
            events = [
                queue_pb2.TransitionEvent.FromString(data)
                for (data,) in rows.execute(
                    "SELECT event FROM ledger WHERE job = ? ORDER BY sequence", (job,)
                )
            ]
        by_state = {state_name(e.to_state): e for e in events}
        assert by_state["VALIDATING"].lease_token == 1, "A announced the start"
        assert by_state["ASSEMBLING"].lease_token == lease[0], "B handed the job on"
    report = check(data_dir)
    assert report.stopped and report.findings == [], report.findings
