"""FollowJobs: many jobs' WatchJob streams over one.

Admission relays every client's watch of a job to audit. One stream per
job made each watch cost a call of its own on both sides (its caller
proof, its handler, its framing); here admission keeps one stream and
says, as its clients come and go, which jobs to follow and which to drop,
each under an id of its own. Each follow runs as a watch of the process's
``JobWatches`` (the same bounds, the same wake-ups, the same reads); the
changes they make in one turn of the event loop leave in one message.

A follow ends on its own — after its job's terminal change, or refused
(the gRPC code and reason WatchJob would have ended with) — and says so
under its id. The stream ends when admission closes it; audit draining ends
each follow ``SERVICE_DRAINING`` first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial

from quire.audit.v1 import audit_service_pb2 as pb
from quire.audit.watch import JobWatches
from quire.errors import FieldViolation, InvalidInput, QuireError
from quire.grpcstatus import status_for
from quire.jobs import job_id, job_name
from quire.jobview import JobFacts
from quire.reasons import ReasonCode
from quire.type import job_pb2

__all__ = ["Follows"]

MAX_CHANGES = 256
"""Changes one message carries at most."""


class Follows:
    """Serves FollowJobs streams over the process's watches."""

    def __init__(
        self, watches: JobWatches, view: Callable[[JobFacts], job_pb2.Job], domain: str
    ) -> None:
        self._watches = watches
        self._view = view
        self._domain = domain

    async def serve(
        self, requests: AsyncIterator[pb.FollowJobsRequest]
    ) -> AsyncIterator[pb.FollowJobsResponse]:
        """The stream's messages, until the caller closes its side."""
        out: asyncio.Queue[pb.FollowedChange | None] = asyncio.Queue()
        follows: dict[int, asyncio.Task[None]] = {}

        async def read() -> None:
            try:
                async for request in requests:
                    for followed in request.follow:
                        if followed.id in follows:
                            out.put_nowait(self._refused(followed.id, _taken()))
                            continue
                        task = asyncio.create_task(self._follow(followed, out))
                        follows[followed.id] = task
                        task.add_done_callback(partial(_forget, follows, followed.id))
                    for key in request.unfollow:
                        dropped = follows.pop(key, None)
                        if dropped is not None:
                            dropped.cancel()
            finally:
                out.put_nowait(None)  # the caller closed its side, or went away

        reader = asyncio.create_task(read())
        try:
            while True:
                first = await out.get()
                if first is None:
                    return
                changes = [first]
                ending = False
                while not out.empty() and len(changes) < MAX_CHANGES:
                    more = out.get_nowait()
                    if more is None:
                        ending = True
                        break
                    changes.append(more)
                yield pb.FollowJobsResponse(changes=changes)
                if ending:
                    return
        finally:
            reader.cancel()
            for task in follows.values():
                task.cancel()

    async def _follow(
        self, followed: pb.FollowedJob, out: asyncio.Queue[pb.FollowedChange | None]
    ) -> None:
        try:
            if followed.after_sequence < 0:
                raise InvalidInput(
                    ReasonCode.INVALID_PAGE,
                    "after_sequence must not be negative",
                    (FieldViolation("after_sequence", "negative"),),
                )
            name = job_name(job_id(followed.name))
            changes = self._watches.changes(
                name, followed.after_sequence, settled_only=followed.settled_only
            )
            async for facts, sequence in changes:
                out.put_nowait(
                    pb.FollowedChange(
                        id=followed.id,
                        change=pb.WatchJobResponse(job=self._view(facts), sequence=sequence),
                    )
                )
            out.put_nowait(pb.FollowedChange(id=followed.id, ended=True))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - told to the caller under the follow's id
            out.put_nowait(self._refused(followed.id, error))

    def _refused(self, key: int, error: Exception) -> pb.FollowedChange:
        reason = error.reason.value if isinstance(error, QuireError) else ReasonCode.INTERNAL.value
        code = status_for(error, self._domain).code
        return pb.FollowedChange(id=key, ended=True, code=code, reason=reason)


def _forget(follows: dict[int, asyncio.Task[None]], key: int, done: asyncio.Task[None]) -> None:
    """A follow that ended leaves the stream's table (unless its id was reused)."""
    if follows.get(key) is done:
        del follows[key]


def _taken() -> InvalidInput:
    return InvalidInput(
        ReasonCode.INVALID_PAGE,
        "this follow id is in use on the stream",
        (FieldViolation("follow.id", "in use"),),
    )
