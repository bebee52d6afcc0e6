"""How fast an upload must move, and how a refused one is heard out.

An upload holds a slot, a descriptor and a temporary file for as long as it
is open, so it must keep moving (the rules of Apache's ``mod_reqtimeout``
``MinRate`` and Envoy's request timeout, together):

- it must send at least ``upload_min_bytes_per_second`` times
  ``upload_idle_seconds`` bytes in every window of ``upload_idle_seconds``
  (the header opens the first window, and every window that reaches its quota
  opens the next). A stream that goes silent, or trickles a byte a second,
  is closed ``upload_idle_seconds`` after its last window opened (and at most
  ``ANSWER_GRACE_SECONDS`` later, see below);
- it must end within ``upload_max_seconds`` of its first message.

Either way the upload is refused with ``UPLOAD_IDLE_TIMEOUT`` as
``InvalidInput`` (INVALID_ARGUMENT): the caller broke the upload's pacing
rules, as it would by sending more bytes than declared; sending the same way
again fails the same way. It is not UNAVAILABLE, which client retry policies
repeat on their own and which would say the service is at fault, nor
RESOURCE_EXHAUSTED, which asks to come back later. DEADLINE_EXCEEDED would
read closest, but by convention it reports the caller's own deadline, and the
error tree has no type for it.

When an upload is refused while the caller is still sending, the answer can
arrive while the caller's client is in the middle of a write; grpc's asyncio
client then reports ``INTERNAL`` ("Internal error from Core") instead of the
status sent. ``hear_out`` therefore reads and discards what the caller still
sends, up to ``upload_linger_bytes`` and ``upload_linger_seconds`` (Apache's
"lingering close"), so that the caller hears the reason. An answer due while
the caller is sending slowly (a timeout, the linger's end) waits for the
caller's next message, for at most ``ANSWER_GRACE_SECONDS``, and goes right
after it, between two of the caller's writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from quire.admission.settings import AdmissionSettings
from quire.admission.v1 import admission_service_pb2 as pb
from quire.errors import InvalidInput
from quire.reasons import ReasonCode

__all__ = ["UploadPace", "PacedRequests", "hear_out", "ANSWER_GRACE_SECONDS"]

ANSWER_GRACE_SECONDS = 1.0
"""How long an answer due while the caller is still sending waits for the
caller's next message, so that it does not land in the middle of a write."""


class UploadPace:
    """The deadline by which an upload's next message must arrive."""

    def __init__(self, settings: AdmissionSettings, *, now: float) -> None:
        self._idle = settings.upload_idle_seconds
        self._max = settings.upload_max_seconds
        self._quota = int(settings.upload_min_bytes_per_second * settings.upload_idle_seconds)
        self._end = now + settings.upload_max_seconds
        self._window_start = now
        self._window_bytes = 0

    def deadline(self) -> float:
        return min(self._window_start + self._idle, self._end)

    def restart(self, now: float) -> None:
        """Open a new window (the header arrived)."""
        self._window_start = now
        self._window_bytes = 0

    def moved(self, size: int, now: float) -> None:
        """Count ``size`` bytes received; a window that reaches its quota opens the next."""
        self._window_bytes += size
        if self._window_bytes >= self._quota:
            self.restart(now)

    def overdue(self, now: float) -> InvalidInput:
        """The refusal for an upload whose deadline passed at ``now``."""
        if now >= self._end:
            message = f"the upload took longer than {self._max:g} s"
        elif self._window_bytes == 0:
            message = f"nothing received for {self._idle:g} s"
        else:
            message = f"fewer than {self._quota} bytes received in {self._idle:g} s"
        return InvalidInput(ReasonCode.UPLOAD_IDLE_TIMEOUT, message)


class PacedRequests:
    """An upload's request stream that raises ``UPLOAD_IDLE_TIMEOUT`` when it stalls.

    A read still pending at the deadline is not cancelled at once: the refusal
    waits up to ``ANSWER_GRACE_SECONDS`` for the caller's next message, so that
    a trickling caller gets it between two of its writes.
    """

    def __init__(
        self, requests: AsyncIterator[pb.UploadSourceRequest], settings: AdmissionSettings
    ) -> None:
        self._requests = requests
        self._loop = asyncio.get_running_loop()
        self._pace = UploadPace(settings, now=self._loop.time())

    def __aiter__(self) -> PacedRequests:
        return self

    async def __anext__(self) -> pb.UploadSourceRequest:
        read = asyncio.ensure_future(_next_or_none(self._requests))
        try:
            await asyncio.wait({read}, timeout=max(0.0, self._pace.deadline() - self._loop.time()))
            if not read.done():
                overdue = self._pace.overdue(self._loop.time())
                await asyncio.wait({read}, timeout=ANSWER_GRACE_SECONDS)
                raise overdue
        finally:
            read.cancel()  # a no-op once done; the caller's disconnect cancels it too
        request = read.result()
        if request is None:
            raise StopAsyncIteration
        now = self._loop.time()
        if request.WhichOneof("payload") == "header":
            self._pace.restart(now)
        else:
            self._pace.moved(len(request.chunk), now)
        return request


async def _next_or_none(
    requests: AsyncIterator[pb.UploadSourceRequest],
) -> pb.UploadSourceRequest | None:
    return await anext(requests, None)


async def hear_out(
    requests: AsyncIterator[pb.UploadSourceRequest], settings: AdmissionSettings
) -> None:
    """Read and discard the rest of a refused upload, within the linger bounds.

    Past ``upload_linger_seconds`` the answer goes right after the caller's next
    message, or ``ANSWER_GRACE_SECONDS`` later if none comes.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.upload_linger_seconds
    discarded = 0
    try:
        async with asyncio.timeout_at(deadline + ANSWER_GRACE_SECONDS):
            async for request in requests:
                discarded += len(request.chunk)
                if discarded > settings.upload_linger_bytes or loop.time() >= deadline:
                    return
    except TimeoutError:
        return
