"""Recording a client's history as it calls: ``HistoryLog`` appends one
operation a line to a client process's file, and ``RecordingClient`` is
``quire.client.AdmissionClient`` with every submit, read, watch, cancel and
download written down as it happens (``quire.testing.history.ops``).

The client is the ordinary one, so a workload behaves as Quire's users'
code does; only the calls that move or show a job are recorded, and
``AdmissionClient.wait``, which is made of ``watch_changes`` and
``get_job``, is recorded through them. A watch's stream that breaks and is
watched again inside ``watch_changes`` is one call: its changes are
recorded, the breaks it rides out are not.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import grpc

from quire.admission.v1 import admission_service_pb2 as pb
from quire.client import AdmissionClient, ArtifactDigestMismatch
from quire.grpcstatus import details_of
from quire.jobs import state_name
from quire.reasons import ReasonCode
from quire.testing.history.ops import Kind, Op, Rpc
from quire.tls import TlsSettings
from quire.type import job_pb2

__all__ = ["HistoryLog", "RecordingClient", "RETRYABLE_CODES"]

RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)
"""Codes that tell a client the same call may succeed later."""


class HistoryLog:
    """One client process's history file, appended to an operation at a
    time and flushed after each, so that a kill loses at most the line being
    written. One process writes one file, under a name unique for the run."""

    def __init__(self, path: Path, process: str) -> None:
        self.path = path
        self.process = process
        self._file = path.open("a", encoding="utf-8")
        self._next = 0

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> HistoryLog:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def record(self, kind: Kind, rpc: Rpc, *, call: int | None = None, **said: Any) -> int:
        """Append one operation; its index (an invoke's answers name it as ``call``)."""
        index = self._next
        self._next += 1
        op = Op(
            self.process,
            index,
            kind,
            rpc,
            index if call is None else call,
            time.monotonic(),
            time.time(),
            **said,
        )
        self._file.write(op.to_json() + "\n")
        self._file.flush()
        return index

    def invoke(self, rpc: Rpc, **said: Any) -> int:
        return self.record(Kind.INVOKE, rpc, **said)

    def refused(self, rpc: Rpc, call: int, error: grpc.aio.AioRpcError, **said: Any) -> None:
        """The error status ``call`` ended with: code, reason, retry hint."""
        details = details_of(error)
        self.record(
            Kind.REFUSED,
            rpc,
            call=call,
            code=error.code().name,
            reason=details.reason,
            retry_after=details.retry_after_seconds,
            retryable=error.code() in RETRYABLE_CODES or details.retry_after_seconds is not None,
            **said,
        )


class RecordingClient(AdmissionClient):
    """An admission client that records each call it makes in ``history``."""

    def __init__(
        self, address: str, token: str, *, history: HistoryLog, tls: TlsSettings | None = None
    ) -> None:
        super().__init__(address, token, tls=tls)
        self.history = history

    async def __aenter__(self) -> RecordingClient:
        return self

    async def submit_request(self, request: pb.SubmitJobRequest) -> job_pb2.Job:
        log, request_id = self.history, request.request_id
        call = log.invoke(Rpc.SUBMIT, request_id=request_id)
        try:
            job = await super().submit_request(request)
        except grpc.aio.AioRpcError as error:
            log.refused(Rpc.SUBMIT, call, error, request_id=request_id)
            raise
        state = state_name(job.state)
        log.record(
            Kind.ACCEPTED, Rpc.SUBMIT, call=call, request_id=request_id, job=job.name, state=state
        )
        return job

    async def get_job(self, name: str) -> job_pb2.Job:
        return await self._read(Rpc.GET, name, super().get_job(name))

    async def cancel(self, name: str, *, request_id: str | None = None) -> job_pb2.Job:
        return await self._read(Rpc.CANCEL, name, super().cancel(name, request_id=request_id))

    async def _read(self, rpc: Rpc, name: str, answer: Any) -> job_pb2.Job:
        call = self.history.invoke(rpc, job=name)
        try:
            job: job_pb2.Job = await answer
        except grpc.aio.AioRpcError as error:
            self.history.refused(rpc, call, error, job=name)
            raise
        self.history.record(Kind.OBSERVED, rpc, call=call, job=name, state=state_name(job.state))
        return job

    async def watch_changes(
        self,
        name: str,
        *,
        after_sequence: int = 0,
        timeout: float | None = None,
        settled_only: bool = False,
    ) -> AsyncGenerator[pb.WatchJobResponse, None]:
        log = self.history
        call = log.invoke(Rpc.WATCH, job=name, sequence=after_sequence)
        changes = super().watch_changes(
            name, after_sequence=after_sequence, timeout=timeout, settled_only=settled_only
        )
        async with contextlib.aclosing(changes):
            try:
                async for change in changes:
                    state = state_name(change.job.state)
                    log.record(
                        Kind.OBSERVED,
                        Rpc.WATCH,
                        call=call,
                        job=name,
                        state=state,
                        sequence=change.sequence,
                    )
                    yield change
            except grpc.aio.AioRpcError as error:
                log.refused(Rpc.WATCH, call, error, job=name)
                raise

    async def download(self, name: str, output: Path) -> str:
        call = self.history.invoke(Rpc.DOWNLOAD, job=name)
        try:
            digest = await super().download(name, output)
        except grpc.aio.AioRpcError as error:
            self.history.refused(Rpc.DOWNLOAD, call, error, job=name)
            raise
        except ArtifactDigestMismatch:
            reason = ReasonCode.DIGEST_MISMATCH.value
            self.history.record(Kind.FETCHED, Rpc.DOWNLOAD, call=call, job=name, reason=reason)
            raise
        self.history.record(Kind.FETCHED, Rpc.DOWNLOAD, call=call, job=name, digest=digest)
        return digest
