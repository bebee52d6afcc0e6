"""Uploads that stay cheap to refuse: a tenant's concurrent uploads, the
process's uploads and declared bytes in flight, and a tenant's share of them
are capped, refused before anything is written and given back on every path;
a stream that stalls or crawls is closed at the idle limit; bytes that are not
the declared type are refused at the door; more bytes than declared is
INVALID_ARGUMENT, never INTERNAL. And 250 uploads held open at a byte a second
(``SLOW_UPLOADS``; ``make bench-slow-uploads`` holds thousands) cannot hold
admission's memory, descriptors or another tenant's upload. The same stack
shows the other per-process cap a tenant could fill: its share of the open
WatchJob streams."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from prometheus_client.parser import text_string_to_metric_families

from quire.admission.settings import AdmissionSettings
from quire.admission.uploads.limits import UploadLedger
from quire.admission.uploads.pace import ANSWER_GRACE_SECONDS, PacedRequests, UploadPace, hear_out
from quire.admission.uploads.typesniff import looks_like
from quire.admission.v1 import admission_service_pb2 as pb
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.errors import InvalidInput, Overloaded
from quire.grpcstatus import reason_of
from quire.runtime import connect_nats
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.consumers import HELD_FOREVER, resume_promptly
from quire.testing.pdfs import write_text_pdf
from quire.workqueue import WORK_STREAM, consumer_name

PDF = "application/pdf"
JSON = "application/json"
MIB = 1024 * 1024

# -- the rules, without a stack ----------------------------------------------


def test_a_tenant_at_its_cap_is_refused_and_its_slots_come_back() -> None:
    ledger = UploadLedger(AdmissionSettings(max_tenant_uploads=2, max_uploads_in_flight=3))
    first, second = ledger.open("a"), ledger.open("a")
    with pytest.raises(Overloaded) as refused:
        ledger.open("a")
    assert refused.value.reason == "TENANT_UPLOADS_EXCEEDED"
    assert refused.value.retry_after and refused.value.retry_after > 0
    other = ledger.open("b")
    with pytest.raises(Overloaded) as full:
        ledger.open("c")
    assert full.value.reason == "UPLOADS_IN_FLIGHT_EXCEEDED"
    for slot in (first, second, other, first):  # closing twice gives back once
        slot.close()
    assert ledger.usage().uploads == 0


def test_declared_bytes_are_reserved_per_tenant_and_in_total() -> None:
    ledger = UploadLedger(
        AdmissionSettings(upload_bytes_in_flight=1000, tenant_upload_share_bytes=600)
    )
    with ledger.open("a") as held:
        held.reserve(500)
        with ledger.open("a") as over_share, pytest.raises(Overloaded) as share:
            over_share.reserve(200)
        assert share.value.reason == "TENANT_TEMP_SHARE_EXCEEDED"
        with ledger.open("b") as fits:
            fits.reserve(500)
            with ledger.open("c") as over_total, pytest.raises(Overloaded) as total:
                over_total.reserve(1)
            assert total.value.reason == "UPLOADS_IN_FLIGHT_EXCEEDED"
        assert ledger.usage() == ledger.usage("a")
    assert ledger.usage().uploads == ledger.usage().reserved_bytes == 0


def test_a_trickle_under_the_minimum_rate_is_overdue_at_the_idle_limit() -> None:
    settings = AdmissionSettings(upload_idle_seconds=2.0, upload_min_bytes_per_second=100)
    pace = UploadPace(settings, now=0.0)
    for second in range(1, 10):  # a byte a second never fills a 200-byte window
        if pace.deadline() <= second:
            break
        pace.moved(1, now=float(second))
    assert pace.deadline() == 2.0
    assert pace.overdue(2.0).reason == "UPLOAD_IDLE_TIMEOUT"

    steady = UploadPace(settings, now=0.0)
    for second in range(1, 100):
        steady.moved(200, now=float(second))
        assert steady.deadline() == second + 2.0, "each full window opens the next"


def test_an_upload_longer_than_the_maximum_is_overdue_however_fast() -> None:
    settings = AdmissionSettings(upload_idle_seconds=30.0, upload_max_seconds=60.0)
    pace = UploadPace(settings, now=0.0)
    for second in range(1, 60):
        pace.moved(MIB, now=float(second))
    assert pace.deadline() == 60.0
    assert "longer than 60 s" in pace.overdue(60.0).message


async def _trickle(gap: float | None, count: int = 50) -> AsyncIterator[pb.UploadSourceRequest]:
    """A header, then a byte every ``gap`` seconds (``None``: silence), bounded."""
    yield pb.UploadSourceRequest(header=pb.SourceHeader(size_bytes=1000))
    for _ in range(count):
        await asyncio.sleep(gap if gap is not None else 5.0)
        if gap is not None:
            yield pb.UploadSourceRequest(chunk=b"x")


async def _overdue_after(requests: AsyncIterator[pb.UploadSourceRequest]) -> float:
    settings = AdmissionSettings(upload_idle_seconds=0.5, upload_min_bytes_per_second=100)
    paced = PacedRequests(requests, settings)
    started = time.monotonic()
    with pytest.raises(InvalidInput) as overdue:
        async for _request in paced:
            pass
    assert overdue.value.reason == "UPLOAD_IDLE_TIMEOUT"
    return time.monotonic() - started


async def test_an_overdue_answer_goes_right_after_the_callers_next_message() -> None:
    trickling = await _overdue_after(_trickle(0.4))  # bytes at 0.4, 0.8, ...: due at 0.5
    assert 0.75 <= trickling < 1.2, "answered right after the byte at 0.8 s"
    silent = await _overdue_after(_trickle(None))
    assert 0.5 + ANSWER_GRACE_SECONDS - 0.05 <= silent < 0.5 + ANSWER_GRACE_SECONDS + 0.5


async def test_a_refused_upload_is_heard_out_within_its_bounds() -> None:
    async def endless(chunk: bytes, gap: float) -> AsyncIterator[pb.UploadSourceRequest]:
        for _ in range(100_000):
            yield pb.UploadSourceRequest(chunk=chunk)
            await asyncio.sleep(gap)

    # Each bound alone would let the caller go on for far longer than the
    # upper bounds below, which only a stall of seconds could reach.
    by_bytes = AdmissionSettings(upload_linger_seconds=60, upload_linger_bytes=10 * MIB)
    started = time.monotonic()
    await hear_out(endless(b"x" * MIB, 0.0), by_bytes)
    assert time.monotonic() - started < 10, "stopped at the byte bound"
    by_time = AdmissionSettings(upload_linger_seconds=0.3, upload_linger_bytes=10 * MIB)
    started = time.monotonic()
    await hear_out(endless(b"x", 0.05), by_time)
    assert 0.3 <= time.monotonic() - started < 10, "stopped after a message past its time"


@pytest.mark.parametrize(
    ("content_type", "head", "expected"),
    [
        (PDF, b"%PDF-1.7\n", True),
        (PDF, b"\x00" * 1000 + b"%PDF-1.4", True),  # viewers look within 1024 bytes
        (PDF, b"\x00" * 1024 + b"%PDF-1.4", False),
        (PDF, b"%PDF1.4\n", True),  # viewers open it without the dash
        (PDF, b"%PDF-X.Y\n", False),  # but a version of digits is required
        (PDF, b"PK\x03\x04", False),
        (PDF, b'{"a": 1}', False),
        (JSON, b'{"a": 1}', True),
        (JSON, b"\xef\xbb\xbf \r\n\t[1]", True),
        (JSON, b"%PDF-1.7", False),
        (JSON, b'"just a string"', False),
        (JSON, b" " * 1024 + b"{}", False),
    ],
)
def test_the_door_sniffs_the_first_bytes(content_type: str, head: bytes, expected: bool) -> None:
    assert looks_like(content_type, head) is expected


# -- helpers for the real stack ----------------------------------------------


def _pdf_bytes(size: int) -> bytes:
    return b"%PDF-1.7\n%" + os.urandom(size - 10)


def _header(
    data: bytes, *, declared: int | None = None, content_type: str = PDF
) -> pb.SourceHeader:
    return pb.SourceHeader(
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data) if declared is None else declared,
        content_type=content_type,
    )


def _stream(
    header: pb.SourceHeader, data: bytes, chunk: int = 256 * 1024
) -> AsyncIterator[pb.UploadSourceRequest]:
    async def requests() -> AsyncIterator[pb.UploadSourceRequest]:
        yield pb.UploadSourceRequest(header=header)
        for offset in range(0, len(data), chunk):
            yield pb.UploadSourceRequest(chunk=data[offset : offset + chunk])

    return requests()


def _detail(error: grpc.aio.AioRpcError, kind):  # type: ignore[no-untyped-def]
    message = kind()
    for detail in rpc_status.from_call(error).details:  # type: ignore[arg-type]
        if detail.Is(kind.DESCRIPTOR):
            detail.Unpack(message)
            return message
    raise AssertionError(f"no {kind.DESCRIPTOR.name} in the status")


async def _refused(call, code: grpc.StatusCode, reason: str) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert (refused.value.code(), reason_of(refused.value)) == (code, reason), (
        refused.value.details()
    )
    return refused.value


async def _refused_for_load(call, reason: str, subject: str) -> None:  # type: ignore[no-untyped-def]
    error = await _refused(call, grpc.StatusCode.RESOURCE_EXHAUSTED, reason)
    assert _detail(error, error_details_pb2.RetryInfo).retry_delay.ToMilliseconds() > 0
    assert [v.subject for v in _detail(error, error_details_pb2.QuotaFailure).violations] == [
        subject
    ]


def _temp_entries(stack: Stack) -> list[Path]:
    return list((stack.data_dir / "blobs" / ".tmp").iterdir())


async def _no_temp_files(stack: Stack) -> None:
    """Wait (bounded) until the server has seen a disconnect and cleaned up."""
    for _ in range(50):
        if not _temp_entries(stack):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"temporary files left: {_temp_entries(stack)}")


async def _nothing_kept(stack: Stack, client: AdmissionClient, digest: str) -> None:
    """No blob, and no source row: a manifest naming the digest is refused."""
    assert not list((stack.data_dir / "blobs").rglob(f"*{digest}*")), "no blob was kept"
    error = await _refused(
        client.submit([PacketItem("doc", digest)]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_MANIFEST",
    )
    violations = _detail(error, error_details_pb2.BadRequest).field_violations
    assert [v.reason for v in violations] == ["UNKNOWN_SOURCE"]


@contextlib.asynccontextmanager
async def _tenants(stack: Stack, *names: str) -> AsyncIterator[list[AdmissionClient]]:
    """Fresh tenants of ``stack``, one client each, closed afterwards."""
    info = StackInfo.read(stack.data_dir)
    address = info.endpoints["admission"]
    async with TenantAdminClient(address, info.operator_token()) as admin:
        replies = [await admin.create_tenant(f"{n}-{uuid.uuid4().hex[:8]}") for n in names]
    clients = [AdmissionClient(address, reply.secret) for reply in replies]
    try:
        yield clients
    finally:
        for client in clients:
            await client.close()


def _process_figures(pid: int) -> tuple[int, int]:
    """Resident memory (KiB) and open descriptors of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


class _LimitsStack(Stack):
    """A stack whose admission can be restarted with other upload limits.

    The file's two sets of limits (hundreds of uploads for one tenant, and
    caps of a few) cannot hold in one process at once; restarting admission
    alone costs one service's start instead of a second stack's."""

    admission_env: dict[str, str] | None = None

    def service_env(self) -> dict[str, str]:
        return {**super().service_env(), **(self.admission_env or {})}

    def admission_limits(self, env: dict[str, str]) -> None:
        """Restart admission with ``env`` unless it already runs with it; the
        other services never read upload limits and keep running."""
        if env == self.admission_env:
            return
        self.stop_service("admission")
        self.admission_env = env
        self.start_service("admission")
        self.wait_healthy()


# -- hundreds of uploads held open at a byte a second -----------------------

SLOW_UPLOADS = int(os.environ.get("SLOW_UPLOADS", "250"))
SLOW_IDLE_SECONDS = 2.0
SLOW_ENV = {
    "QUIRE_UPLOAD_IDLE_SECONDS": str(SLOW_IDLE_SECONDS),
    "QUIRE_MAX_TENANT_UPLOADS": str(SLOW_UPLOADS + 100),  # one tenant may hold all
}
SLOW_PREFIX_BYTES = 4096  # past the sniff window, so each one holds a temporary file
SLOW_DECLARED_BYTES = 64 * 1024
CLOSE_SLACK_SECONDS = 4.0


@pytest.fixture(scope="module")
def limits_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_LimitsStack]:
    """The file's own stack; each test sets admission's limits it needs."""
    stack = _LimitsStack(
        tmp_path_factory.mktemp("limits") / "stack", env={"QUIRE_DRAIN_SECONDS": "5"}
    )
    stack.admission_env = SLOW_ENV  # the first test's: it needs no restart
    stack.start()
    yield stack
    stack.stop()


@dataclass
class _Figures:
    """Samples of admission's memory and descriptors and of its temporary files."""

    pid: int
    tmp_dir: Path
    rss_kib: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    temp_files: list[int] = field(default_factory=list)

    def sample(self) -> None:
        rss, fds = _process_figures(self.pid)
        self.rss_kib.append(rss)
        self.fds.append(fds)
        self.temp_files.append(len(os.listdir(self.tmp_dir)))

    async def sample_until(self, done: asyncio.Event) -> None:
        for _ in range(2000):  # 0.05 s apart: at most 100 s
            self.sample()
            if done.is_set():
                return
            await asyncio.sleep(0.05)


async def _slow_upload(client: AdmissionClient, opened: list[float]) -> tuple[float, str, str]:
    """One upload: a valid first 4 KiB, then a byte a second. Returns how long
    it stayed open after its first 4 KiB, and its status code and reason."""
    data = _pdf_bytes(SLOW_DECLARED_BYTES)
    since = [time.monotonic()]

    async def requests() -> AsyncIterator[pb.UploadSourceRequest]:
        yield pb.UploadSourceRequest(header=_header(data))
        yield pb.UploadSourceRequest(chunk=data[:SLOW_PREFIX_BYTES])
        since[0] = time.monotonic()
        opened.append(since[0])
        for offset in range(SLOW_PREFIX_BYTES, SLOW_PREFIX_BYTES + 30):  # 30 s at most
            await asyncio.sleep(1.0)
            yield pb.UploadSourceRequest(chunk=data[offset : offset + 1])

    try:
        await client.upload_stream(requests())
    except grpc.aio.AioRpcError as error:
        # A status without Quire's reason came from the transport, not from
        # admission: keep what it said, so a failure shows it.
        reason = reason_of(error) or f"(transport: {error.details()})"
        return time.monotonic() - since[0], error.code().name, reason
    return time.monotonic() - since[0], "OK", ""


TRANSPORT_MISREPORT = "(transport: Internal error from Core)"


async def _uploads_refused(stack: Stack, reason: str) -> float:
    """Admission's count of uploads refused for ``reason``, from its /metrics."""
    address = StackInfo.read(stack.data_dir).metrics_endpoints["admission"]
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.get(f"http://{address}/metrics")
    total = 0.0
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            if sample.name == "quire_uploads_refused_total" and sample.labels["reason"] == reason:
                total += sample.value
    return total


@pytest.mark.stack
async def test_hundreds_of_uploads_at_a_byte_a_second_are_closed_at_the_idle_limit(
    limits_stack: _LimitsStack, tmp_path: Path
) -> None:
    stack = limits_stack
    await asyncio.to_thread(stack.admission_limits, SLOW_ENV)
    async with _tenants(stack, "slowloris", "bystander") as (slow, bystander):
        figures = _Figures(stack.pid("admission"), stack.data_dir / "blobs" / ".tmp")
        warm = write_text_pdf(tmp_path / "warm.pdf", [f"warm {uuid.uuid4().hex}"])
        await bystander.upload(warm)  # the first upload's imports are not a leak
        figures.sample()
        idle_closes_before = await _uploads_refused(stack, "UPLOAD_IDLE_TIMEOUT")
        done = asyncio.Event()
        sampler = asyncio.create_task(figures.sample_until(done))
        opened: list[float] = []
        started = time.monotonic()
        calls = [asyncio.create_task(_slow_upload(slow, opened)) for _ in range(SLOW_UPLOADS)]
        for _ in range(200):  # 20 s at most for all of them to be sending
            if len(opened) == SLOW_UPLOADS:
                break
            await asyncio.sleep(0.1)
        all_open = time.monotonic()
        path = write_text_pdf(tmp_path / "by.pdf", [f"bystander {uuid.uuid4().hex}"])
        source = await bystander.upload(path)  # while the slow ones are stalled
        results = await asyncio.wait_for(asyncio.gather(*calls), timeout=60)
        all_closed = time.monotonic()
        await asyncio.sleep(0.5)
        done.set()
        await sampler
        figures.sample()
        idle_closes = await _uploads_refused(stack, "UPLOAD_IDLE_TIMEOUT") - idle_closes_before

    outcomes = Counter((code, reason) for _held, code, reason in results)
    held_for = sorted(held for held, _code, _reason in results)
    rss, fds, temp = figures.rss_kib, figures.fds, figures.temp_files
    print(
        f"\nslow uploads: {len(opened)} of {SLOW_UPLOADS} sending after {all_open - started:.1f} s;"
        f" at most {max(temp)} held a temporary file at once; outcomes {sorted(outcomes.items())}\n"
        f"closed {held_for[len(held_for) // 2]:.1f} s (median) / {held_for[-1]:.1f} s (max) after"
        f" their first 4 KiB, the last {all_closed - all_open:.1f} s after all were sending"
        f" (idle limit {SLOW_IDLE_SECONDS:g} s)\n"
        f"admission RSS KiB before/peak/after: {rss[0]}/{max(rss)}/{rss[-1]};"
        f" fds before/peak/after: {fds[0]}/{max(fds)}/{fds[-1]};"
        f" temporary files after: {temp[-1]}"
    )
    assert len(opened) == SLOW_UPLOADS
    assert idle_closes == SLOW_UPLOADS, "admission closed every one at the idle limit"
    # What the clients heard: admission's status, except where grpcio's asyncio
    # client overwrote it because it arrived while the client was writing
    # (grpc/grpc#36066: INTERNAL "Internal error from Core", no details). That
    # is the client library's bug, and how often it strikes depends on how busy
    # the machine is (a few of 500 when quiet, 24 of 250 beside a busy suite);
    # the count above is the server's record, so it is not bounded here.
    outcomes.pop(("INTERNAL", TRANSPORT_MISREPORT), 0)
    assert set(outcomes) == {("INVALID_ARGUMENT", "UPLOAD_IDLE_TIMEOUT")}
    assert source.sha256, "another tenant's upload went through meanwhile"
    assert max(temp) >= SLOW_UPLOADS // 2, "they were held at once"
    assert held_for[-1] <= SLOW_IDLE_SECONDS + CLOSE_SLACK_SECONDS, "each closed at the limit"
    assert all_closed - all_open <= SLOW_IDLE_SECONDS + CLOSE_SLACK_SECONDS
    assert temp[-1] == 0, "no temporary file left"
    assert fds[-1] <= fds[0] + 10, "no descriptor leaked"
    assert max(fds) <= fds[0] + SLOW_UPLOADS + 50, "at most a descriptor each"
    assert max(rss) <= rss[0] + 256 * 1024
    assert rss[-1] <= rss[0] + 128 * 1024


# -- caps, on a stack with small limits --------------------------------------

IDLE_SECONDS = 3.0
TIGHT_ENV = {
    "QUIRE_MAX_TENANT_UPLOADS": "2",
    "QUIRE_MAX_UPLOADS_IN_FLIGHT": "5",
    "QUIRE_UPLOAD_BYTES_IN_FLIGHT": "4000000",
    "QUIRE_TENANT_UPLOAD_SHARE_BYTES": "2500000",
    "QUIRE_UPLOAD_IDLE_SECONDS": str(IDLE_SECONDS),
    "QUIRE_UPLOAD_MIN_BYTES_PER_SECOND": "1024",
    "QUIRE_MAX_WATCHES": "5",
    "QUIRE_MAX_TENANT_WATCHES": "2",
}
KEEPALIVE_BYTES = 1024
KEEPALIVE_SECONDS = 0.25  # 4 KiB/s, over the minimum of 1 KiB/s
MAX_KEEPALIVES = 240  # a held upload stops trickling after a minute whatever happens


@pytest.fixture
def tight(limits_stack: _LimitsStack) -> _LimitsStack:
    """The file's stack, its admission with small upload limits and a 3-second idle limit."""
    limits_stack.admission_limits(TIGHT_ENV)
    return limits_stack


class _HeldUpload:
    """An upload kept open by a trickle over the minimum rate until it is told to
    ``complete``, ``stall`` (go silent) or ``drop`` (disconnect)."""

    def __init__(self, client: AdmissionClient, size: int) -> None:
        self.data = _pdf_bytes(size)
        self.digest = hashlib.sha256(self.data).hexdigest()
        self._sent = 0
        self._ending = ""
        self._wake = asyncio.Event()
        self.call = asyncio.create_task(client.upload_stream(self._requests()))

    async def _requests(self) -> AsyncIterator[pb.UploadSourceRequest]:
        yield pb.UploadSourceRequest(header=_header(self.data))
        for _ in range(MAX_KEEPALIVES):
            if self._ending:
                break
            yield pb.UploadSourceRequest(chunk=self.data[self._sent : self._sent + KEEPALIVE_BYTES])
            self._sent += KEEPALIVE_BYTES
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), KEEPALIVE_SECONDS)
        if self._ending == "complete":
            for offset in range(self._sent, len(self.data), 256 * 1024):
                yield pb.UploadSourceRequest(chunk=self.data[offset : offset + 256 * 1024])
        elif self._ending == "stall":
            await asyncio.sleep(30)  # silent; the server closes the stream long before

    async def opened(self) -> None:
        """Wait until a few keepalives went out and the server has not answered."""
        for _ in range(100):
            if self._sent >= 3 * KEEPALIVE_BYTES:
                break
            await asyncio.sleep(0.05)
        assert not self.call.done(), "the held upload was taken"

    async def complete(self) -> pb.Source:
        self._ending = "complete"
        self._wake.set()
        return await asyncio.wait_for(self.call, timeout=30)

    async def stall(self) -> grpc.aio.AioRpcError:
        self._ending = "stall"
        self._wake.set()
        started = time.monotonic()
        error = await _refused(
            asyncio.wait_for(self.call, timeout=30),
            grpc.StatusCode.INVALID_ARGUMENT,
            "UPLOAD_IDLE_TIMEOUT",
        )
        assert time.monotonic() - started <= IDLE_SECONDS + CLOSE_SLACK_SECONDS
        return error

    async def drop(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.call


async def _held(client: AdmissionClient, size: int) -> _HeldUpload:
    held = _HeldUpload(client, size)
    await held.opened()
    return held


async def _held_at_once(*uploads: tuple[AdmissionClient, int]) -> list[_HeldUpload]:
    """Several held uploads opened together: each waits its keepalives at the same time."""
    return list(await asyncio.gather(*(_held(client, size) for client, size in uploads)))


async def _eventually_uploaded(client: AdmissionClient, size: int) -> pb.Source:
    """An upload that succeeds once the server has seen a disconnect (bounded)."""
    data = _pdf_bytes(size)
    for _ in range(50):
        try:
            return await client.upload_stream(_stream(_header(data), data))
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
        await asyncio.sleep(0.1)
    raise AssertionError("the dropped upload's reservation was never given back")


@pytest.mark.stack
async def test_concurrent_uploads_over_the_caps_are_refused_and_slots_come_back(
    tight: Stack,
) -> None:
    async with _tenants(tight, "a", "b", "c") as (a, b, c):
        holding_a = await _held_at_once((a, 200_000), (a, 200_000))
        refused = _pdf_bytes(50_000)
        await _refused_for_load(
            a.upload_stream(_stream(_header(refused), refused)),
            "TENANT_UPLOADS_EXCEEDED",
            "tenant:concurrent_uploads",
        )
        await _nothing_kept(tight, a, hashlib.sha256(refused).hexdigest())
        assert len(_temp_entries(tight)) == 2, "only the held uploads' files"
        assert (await b.upload_stream(_stream(_header(refused), refused))).sha256, (
            "another tenant is not refused"
        )

        *holding_b, holding_c = await _held_at_once((b, 200_000), (b, 200_000), (c, 200_000))
        await _refused_for_load(
            c.upload_stream(_stream(_header(refused), refused)),
            "UPLOADS_IN_FLIGHT_EXCEEDED",
            "process:concurrent_uploads",
        )
        for held in (*holding_b, holding_c):
            await held.drop()

        assert (await holding_a[0].complete()).sha256 == holding_a[0].digest
        await holding_a[1].drop()
        await _no_temp_files(tight)  # removed as the slot is given back
        # Both of a's slots came back (stored, dropped): two more are taken at once.
        again = await _held_at_once((a, 100_000), (a, 100_000))
        for held in again:
            assert (await held.complete()).sha256 == held.digest
        await _eventually_uploaded(c, 50_000)
    assert _temp_entries(tight) == []


@pytest.mark.stack
async def test_declared_bytes_over_a_share_are_refused_and_given_back_on_every_path(
    tight: Stack,
) -> None:
    async with _tenants(tight, "a", "b", "c") as (a, b, c):
        big = await _held(a, 2_000_000)  # of a's share of 2.5 MB
        over_share = _pdf_bytes(600_000)
        await _refused_for_load(
            a.upload_stream(_stream(_header(over_share), over_share)),
            "TENANT_TEMP_SHARE_EXCEEDED",
            "tenant:upload_bytes",
        )
        await _nothing_kept(tight, a, hashlib.sha256(over_share).hexdigest())
        other = await _held(b, 1_500_000)  # 3.5 of the process's 4 MB
        over_total = _pdf_bytes(600_000)
        await _refused_for_load(
            c.upload_stream(_stream(_header(over_total), over_total)),
            "UPLOADS_IN_FLIGHT_EXCEEDED",
            "process:upload_bytes",
        )
        await _nothing_kept(tight, c, hashlib.sha256(over_total).hexdigest())
        fits = _pdf_bytes(400_000)  # a refusal reserved nothing: 3.9 MB fit
        assert (await c.upload_stream(_stream(_header(fits), fits))).sha256

        await big.stall()  # closed at the idle limit, its 2 MB given back
        await _nothing_kept(tight, a, big.digest)
        assert len(_temp_entries(tight)) == 1, "the stalled upload's file is gone"
        stored = await _held(a, 2_400_000)  # fits a's share only if the stall gave back
        assert (await stored.complete()).sha256 == stored.digest

        await other.drop()  # b disconnects: its 1.5 MB must come back too
        await _no_temp_files(tight)
        both = await _held_at_once((a, 2_400_000), (c, 1_500_000))  # 3.9 MB
        for held in both:
            assert (await held.complete()).sha256 == held.digest
    assert _temp_entries(tight) == []


def _silent(
    header: pb.SourceHeader | None, first: bytes = b"", trickle: bool = False
) -> AsyncIterator[pb.UploadSourceRequest]:
    async def requests() -> AsyncIterator[pb.UploadSourceRequest]:
        if header is not None:
            yield pb.UploadSourceRequest(header=header)
        if first:
            yield pb.UploadSourceRequest(chunk=first)
        for _ in range(20):  # 20 s at most
            await asyncio.sleep(1.0)
            if trickle:
                yield pb.UploadSourceRequest(chunk=b" ")

    return requests()


@pytest.mark.stack
async def test_a_stream_that_stalls_or_crawls_is_closed_at_the_idle_limit(tight: Stack) -> None:
    data = _pdf_bytes(100_000)
    cases = {
        "no header": _silent(None),
        "header only": _silent(_header(data)),
        "stalled after 4 KiB": _silent(_header(data), data[:4096]),
        "a byte a second": _silent(_header(data), data[:4096], trickle=True),
    }
    async with _tenants(tight, *(name.replace(" ", "-") for name in cases)) as clients:
        refused_before = await _uploads_refused(tight, "UPLOAD_IDLE_TIMEOUT")
        started = time.monotonic()
        calls = [
            _heard_refused(client.upload_stream(stream), crawling="second" in name)
            for (name, stream), client in zip(cases.items(), clients, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*calls), timeout=30)
        elapsed = time.monotonic() - started
        assert elapsed <= IDLE_SECONDS + CLOSE_SLACK_SECONDS, elapsed
        # Admission's own record: every one of them closed at the idle limit.
        refused = await _uploads_refused(tight, "UPLOAD_IDLE_TIMEOUT") - refused_before
        assert refused == len(cases)
        assert _temp_entries(tight) == [], "temporary files removed"
        for client in clients:  # each slot came back
            await _held_then_done(client)


async def _heard_refused(call, *, crawling: bool) -> None:  # type: ignore[no-untyped-def]
    """Refused at the idle limit, as the client heard it. A client still
    writing when the status arrives (``crawling``) may be told INTERNAL
    "Internal error from Core" by grpcio instead (grpc/grpc#36066); the
    server's count is then the record, which the test checks as well."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    error = refused.value
    heard = (error.code(), reason_of(error) or f"(transport: {error.details()})")
    allowed = {(grpc.StatusCode.INVALID_ARGUMENT, "UPLOAD_IDLE_TIMEOUT")}
    if crawling:
        allowed.add((grpc.StatusCode.INTERNAL, TRANSPORT_MISREPORT))
    assert heard in allowed, heard


async def _held_then_done(client: AdmissionClient) -> None:
    held = await _held_at_once((client, 50_000), (client, 50_000))
    for upload in held:
        assert (await upload.complete()).sha256 == upload.digest


# -- the door and the declaration, on the shared stack -----------------------


@pytest.mark.stack
@pytest.mark.parametrize(
    ("content_type", "data"),
    [
        (PDF, b"PK\x03\x04" + os.urandom(3000)),
        (PDF, b"\x00" * 1024 + b"%PDF-1.7\n" + os.urandom(100)),
        (PDF, b'{"looks": "like json"}'),
        (JSON, b"%PDF-1.7\n" + os.urandom(2000)),
        (JSON, b"<html></html>"),
        (PDF, b"\xd0\xcf\x11\xe0" + os.urandom(5 * MIB)),  # refused mid-stream, heard out
    ],
    ids=["zip-as-pdf", "pdf-header-too-late", "json-as-pdf", "pdf-as-json", "html", "big-doc"],
)
async def test_bytes_that_are_not_the_declared_type_are_refused_at_the_door(
    stack, tenants, content_type: str, data: bytes
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("door")
    header = _header(data, content_type=content_type)
    error = await _refused(
        client.upload_stream(_stream(header, data, chunk=64 * 1024)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "TYPE_MISMATCH",
    )
    bad = _detail(error, error_details_pb2.BadRequest)
    assert [v.field for v in bad.field_violations] == ["header.content_type"]
    assert _temp_entries(stack) == []
    await _nothing_kept(stack, client, header.sha256)


@pytest.mark.stack
async def test_a_pdf_header_a_little_late_passes_the_door_for_the_validator_to_judge(
    stack, tenants
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("door-late")
    data = b"junk\n" * 10 + b"%PDF-1.7\n" + os.urandom(500)
    assert (await client.upload_stream(_stream(_header(data), data))).sha256


@pytest.mark.stack
@pytest.mark.parametrize("overrun", [1, MIB, 25 * MIB], ids=["a-byte", "a-mib", "twice"])
async def test_an_overrun_at_25_mib_is_invalid_argument_never_internal(
    stack, tenants, overrun: int
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("overrun")
    declared = 25 * MIB  # the default ceiling
    data = _pdf_bytes(declared + overrun)
    header = _header(data[:declared], declared=declared)
    for _ in range(2):  # grpc's client raced to INTERNAL in about half the tries
        calls = [
            _refused(
                client.upload_stream(_stream(header, data, chunk=64 * 1024)),
                grpc.StatusCode.INVALID_ARGUMENT,
                "SIZE_EXCEEDS_DECLARATION",
            )
            for _ in range(3)
        ]
        await asyncio.wait_for(asyncio.gather(*calls), timeout=120)
    assert _temp_entries(stack) == []
    await _nothing_kept(stack, client, header.sha256)


# -- a tenant's share of the open watches -------------------------------------


async def _watching(client: AdmissionClient, name: str) -> grpc.aio.UnaryStreamCall:
    """A raw WatchJob stream (the client's own watch would retry), once its
    first change has arrived: it is open and counted."""
    call = client._stub.WatchJob(pb.WatchJobRequest(name=name), metadata=client._metadata)  # noqa: SLF001
    await asyncio.wait_for(call.read(), 30)
    return call


@pytest.mark.stack
async def test_a_tenant_holds_only_its_share_of_the_open_watches(
    tight: _LimitsStack, tmp_path: Path
) -> None:
    """With 5 watches per process and 2 per tenant, a tenant's third watch is
    refused (TENANT_WATCHES_EXCEEDED) while another tenant's first is served,
    and a watch closed gives its place back."""
    nc = await connect_nats(tight.nats_url, "quire-test-watches", **tight.nats_login())
    js = nc.jetstream(timeout=10)
    held = consumer_name("validate", "interactive")  # the jobs stay open, watched
    await js.pause_consumer(WORK_STREAM, held, HELD_FOREVER)
    calls: list[grpc.aio.UnaryStreamCall] = []
    try:
        async with _tenants(tight, "greedy", "other") as (greedy, other):
            jobs: dict[str, list[str]] = {"greedy": [], "other": []}
            for who, client, count in (("greedy", greedy, 3), ("other", other, 1)):
                pdf = write_text_pdf(tmp_path / f"{who}.pdf", [f"watch {uuid.uuid4().hex}"])
                digest = (await client.upload(pdf)).sha256
                for _ in range(count):
                    job = await client.submit(
                        [PacketItem("d", digest)], request_id=str(uuid.uuid4())
                    )
                    jobs[who].append(job.name)
            calls += [await _watching(greedy, name) for name in jobs["greedy"][:2]]
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _watching(greedy, jobs["greedy"][2])
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert reason_of(refused.value) == "TENANT_WATCHES_EXCEEDED"
            calls.append(await _watching(other, jobs["other"][0]))  # room in the process

            calls.pop(0).cancel()  # one of greedy's ends: its place comes back
            for _ in range(100):
                try:
                    calls.append(await _watching(greedy, jobs["greedy"][2]))
                    break
                except grpc.aio.AioRpcError as error:
                    assert reason_of(error) == "TENANT_WATCHES_EXCEEDED"
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("a closed watch never gave its place back")
    finally:
        for call in calls:
            call.cancel()
        await resume_promptly(js, WORK_STREAM, held)
        await nc.close()
