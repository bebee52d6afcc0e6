"""``quire batch submit|status|cancel|jobs``: a portfolio of packets as one batch.

A batch is persisted by admission at once and turned into jobs by its
dispatcher, so there is no stream to watch: ``--wait`` polls GetBatch,
gently, until the batch has finished (DONE, or CANCELLED with every job it
dispatched ended).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from quire.admission.v1 import batch_pb2
from quire.cli.batchfiles import read_batch
from quire.cli.batchsend import send_batch
from quire.cli.config import ClientConfig
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output, message_dict
from quire.cli.progress import batch_progress, progress_wanted
from quire.client import AdmissionClient
from quire.jobs import state_name, state_rank
from quire.pipeline import State

__all__ = [
    "batch_resource",
    "batch_dict",
    "batch_lines",
    "batch_exit",
    "submit",
    "status",
    "cancel",
    "jobs",
]

POLL_FIRST_SECONDS = 0.2
POLL_MAX_SECONDS = 2.0
_BATCH_PREFIX = "BATCH_STATE_"
NOT_DISPATCHED = "NOT_DISPATCHED"
CANCELLED_BEFORE_DISPATCH = "CANCELLED_BEFORE_DISPATCH"


def batch_resource(batch: str) -> str:
    """``batches/{batch}`` whether the user typed the id or the resource name."""
    return batch if batch.startswith("batches/") else f"batches/{batch}"


def batch_state_name(value: int) -> str:
    return batch_pb2.BatchState.Name(value).removeprefix(_BATCH_PREFIX)  # type: ignore[arg-type]


def _job_counts(batch: batch_pb2.Batch) -> dict[str, int]:
    """The dispatched jobs by state, in pipeline order (terminal states last)."""
    counts = {state_name(count.state): count.count for count in batch.job_counts}
    return dict(sorted(counts.items(), key=lambda pair: (state_rank(pair[0]), pair[0])))


def batch_dict(batch: batch_pb2.Batch) -> dict[str, Any]:
    """The batch as JSON, its states as the CLI prints them (``DONE``, ``COMPLETED``)."""
    data = message_dict(batch)
    data["state"] = batch_state_name(batch.state)
    data["job_counts"] = [
        {"state": state, "count": count} for state, count in _job_counts(batch).items()
    ]
    return data


def _summary(batch: batch_pb2.Batch) -> str:
    return "  ".join(f"{state} {count}" for state, count in _job_counts(batch).items())


def batch_lines(batch: batch_pb2.Batch) -> list[str]:
    head = (
        f"{batch.name}  {batch_state_name(batch.state)}  packets {batch.packet_count}"
        f"  dispatched {batch.dispatched_count}  ended {batch.terminal_count}"
    )
    lines = [head]
    lines += [f"  {state}  {count}" for state, count in _job_counts(batch).items()]
    if batch.cancelled_undispatched_count:
        lines.append(f"  {CANCELLED_BEFORE_DISPATCH}  {batch.cancelled_undispatched_count}")
    return lines


def batch_exit(batch: batch_pb2.Batch) -> int:
    """0 when every packet's job completed; REJECTED when the others were only
    refused; FAILED when one failed or was cancelled, or the batch has not ended."""
    counts = _job_counts(batch)
    if counts.get(State.COMPLETED, 0) == batch.packet_count:
        return ExitCode.OK
    failed = counts.get(State.FAILED, 0) + counts.get(State.CANCELLED, 0)
    if failed or batch.cancelled_undispatched_count or not batch.HasField("finish_time"):
        return ExitCode.FAILED
    return ExitCode.REJECTED


def _client(config: ClientConfig) -> AdmissionClient:
    return AdmissionClient(config.admission, config.token, tls=config.tls)


def _print(batch: batch_pb2.Batch, out: Output) -> None:
    for line in batch_lines(batch):
        out.line(line)
    out.result({"batch": batch_dict(batch)})


async def _wait(
    client: AdmissionClient, name: str, *, timeout: float, out: Output
) -> batch_pb2.Batch:
    """Poll GetBatch until the batch has finished, drawing its progress."""
    deadline = time.monotonic() + timeout
    delay = POLL_FIRST_SECONDS
    with batch_progress(name, enabled=progress_wanted(out.as_json)) as progress:
        batch = await client.get_batch(name)
        while not batch.HasField("finish_time"):
            progress.show(batch.terminal_count, batch.packet_count, _summary(batch))
            if time.monotonic() + delay > deadline:
                state = batch_state_name(batch.state)
                raise TimeoutError(
                    f"{name} still {state}, {batch.terminal_count}/{batch.packet_count}"
                    f" ended after {timeout:.0f}s"
                )
            await asyncio.sleep(delay)
            before = (batch.terminal_count, batch.dispatched_count)
            batch = await client.get_batch(name)
            changed = (batch.terminal_count, batch.dispatched_count) != before
            delay = POLL_FIRST_SECONDS if changed else min(delay * 2, POLL_MAX_SECONDS)
        progress.show(batch.terminal_count, batch.packet_count, _summary(batch))
    return batch


async def submit(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    entries = read_batch(Path(args.source))
    async with _client(config) as client:
        batch = await send_batch(
            client,
            entries,
            request_id=args.request_id,
            show_progress=progress_wanted(out.as_json),
        )
        _print(batch, out)
        if not args.wait:
            return ExitCode.OK
        batch = await _wait(client, batch.name, timeout=args.timeout, out=out)
    _print(batch, out)
    return batch_exit(batch)


async def status(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    name = batch_resource(args.batch)
    async with _client(config) as client:
        if not args.wait:
            _print(await client.get_batch(name), out)
            return ExitCode.OK
        batch = await _wait(client, name, timeout=args.timeout, out=out)
    _print(batch, out)
    return batch_exit(batch)


async def cancel(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as client:
        reply = await client.cancel_batch(batch_resource(args.batch), request_id=args.request_id)
    counts = {
        "not_dispatched_cancelled": reply.not_dispatched_cancelled,
        "in_flight_finishing": reply.in_flight_finishing,
        "already_terminal": reply.already_terminal,
    }
    out.line(
        f"{reply.batch.name}  {batch_state_name(reply.batch.state)}  "
        + "  ".join(f"{key}={value}" for key, value in counts.items())
    )
    out.result({"batch": batch_dict(reply.batch), **counts})
    return ExitCode.OK


def _packet_state(job: batch_pb2.BatchJob) -> str:
    if job.cancelled_undispatched:
        return CANCELLED_BEFORE_DISPATCH
    return state_name(job.state) if job.job else NOT_DISPATCHED


def _packet_line(job: batch_pb2.BatchJob) -> str:
    parts = [str(job.index), job.bundle_id or "-", job.job or "-", _packet_state(job)]
    if job.reason_code:
        parts.append(job.reason_code)
    return "  ".join(parts)


async def jobs(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    listed: list[dict[str, Any]] = []
    async with _client(config) as client:
        async for job in client.batch_jobs(batch_resource(args.batch)):
            out.line(_packet_line(job))
            listed.append({**message_dict(job), "index": job.index, "state": _packet_state(job)})
    out.result({"jobs": listed})
    return ExitCode.OK
