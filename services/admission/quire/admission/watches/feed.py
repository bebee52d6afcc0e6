"""Admission's one stream of audit's changes for every watch it relays.

Each client's WatchJob is relayed from audit. Rather than a call to audit
per watch, the relays share one ``FollowJobs`` stream (``quire.audit.follow``):
a relay follows its job under an id, reads its changes from its own queue,
and unfollows when its client goes away. The follows and unfollows of one
turn of the event loop travel in one message.

The stream opens with the first follow and stays open. When it breaks
(audit restarting, the network), every follow on it learns so at once —
its relay ends UNAVAILABLE and its client watches again, as a broken
WatchJob call would have made it — and the next follow opens a new one.
An audit that does not serve FollowJobs (an older release, during a
rollout) answers UNIMPLEMENTED: the feed says so (``unsupported``) and the
relays call WatchJob per job instead. Nothing is written before audit's
headers arrive, so that refusal is read as sent (a write racing it can
turn it into INTERNAL in gRPC's core).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import grpc

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc

__all__ = ["AuditFeed", "Follow"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Follow:
    """One relay's follow: its id on the stream and the changes it receives."""

    id: int
    name: str
    after: int
    settled_only: bool
    changes: asyncio.Queue[audit_service_pb2.FollowedChange] = field(default_factory=asyncio.Queue)


class AuditFeed:
    """The shared FollowJobs stream, opened on demand."""

    def __init__(self, audit: audit_service_pb2_grpc.AuditServiceStub) -> None:
        self._audit = audit
        self._ids = itertools.count(1)
        self._call: grpc.aio.StreamStreamCall | None = None
        self._follows: dict[int, Follow] = {}
        """The follows on the current stream."""
        self._to_follow: list[Follow] = []
        self._to_unfollow: list[int] = []
        self._sending = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.unsupported = False
        """Audit answered UNIMPLEMENTED: relay each watch with WatchJob."""
        self.streams_opened = 0

    @property
    def following(self) -> int:
        return len(self._follows)

    def follow(self, name: str, after: int, *, settled_only: bool = False) -> Follow:
        """Follow ``name`` after ``after`` (only its settled states if
        ``settled_only``); its changes arrive in ``changes``."""
        follow = Follow(next(self._ids), name, after, settled_only)
        self._follows[follow.id] = follow
        self._to_follow.append(follow)
        self._send_soon()
        return follow

    def unfollow(self, follow: Follow) -> None:
        """Stop following (the relay's client went away); nothing if it ended."""
        if self._follows.pop(follow.id, None) is not None:
            self._to_unfollow.append(follow.id)
            self._send_soon()

    def ended(self, follow: Follow) -> None:
        """Audit ended the follow: forget it without telling audit."""
        self._follows.pop(follow.id, None)

    def close(self) -> None:
        """End the stream (draining); its follows end UNAVAILABLE."""
        if self._call is not None:
            self._call.cancel()
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send_soon(self) -> None:
        if not self._sending:
            self._sending = True
            asyncio.get_running_loop().call_soon(lambda: self._spawn(self._send()))

    def _open(self) -> grpc.aio.StreamStreamCall:
        if self._call is None:
            self._call = self._audit.FollowJobs(wait_for_ready=True)
            self.streams_opened += 1
            self._spawn(self._read(self._call))
        return self._call

    async def _send(self) -> None:
        try:
            while self._to_follow or self._to_unfollow:
                follows, self._to_follow = self._to_follow, []
                unfollows, self._to_unfollow = self._to_unfollow, []
                # A follow broken or ended before its turn is not sent, and
                # nothing is unfollowed on a stream that is not open.
                follows = [f for f in follows if self._follows.get(f.id) is f]
                if self._call is None:
                    unfollows = []
                if not follows and not unfollows:
                    continue
                request = audit_service_pb2.FollowJobsRequest(
                    follow=[
                        audit_service_pb2.FollowedJob(
                            id=f.id,
                            name=f.name,
                            after_sequence=f.after,
                            settled_only=f.settled_only,
                        )
                        for f in follows
                    ],
                    unfollow=unfollows,
                )
                call = self._open()
                try:
                    # Audit sends its headers first: a stream it refuses (an
                    # older audit's UNIMPLEMENTED) ends before anything is
                    # written, so its status reaches the reader as sent (a
                    # write racing the refusal can turn it into INTERNAL).
                    await call.initial_metadata()
                    if call.done():
                        continue
                    await call.write(request)
                except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                    # The stream is ending: its reader breaks every follow on it.
                    pass
        finally:
            self._sending = False

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        code = grpc.StatusCode.UNAVAILABLE
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    break
                assert isinstance(response, audit_service_pb2.FollowJobsResponse)
                for change in response.changes:
                    follow = self._follows.get(change.id)
                    if follow is not None:
                        follow.changes.put_nowait(change)
        except grpc.aio.AioRpcError as error:
            code = error.code()
        except asyncio.CancelledError:
            pass
        finally:
            if code == grpc.StatusCode.UNIMPLEMENTED:
                self.unsupported = True
            if self._call is call:
                self._call = None
                broken, self._follows = self._follows, {}
                for follow in broken.values():
                    follow.changes.put_nowait(
                        audit_service_pb2.FollowedChange(
                            id=follow.id, ended=True, code=code.value[0]
                        )
                    )
            log.info("audit feed ended (%s)", code.name)
