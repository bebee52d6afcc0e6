"""One call to a source system: ``GET {base_url}/{key}``, streamed.

The call runs on the event loop (it is I/O) through the process's one
``httpx.AsyncClient`` (``source_client``, made in ``main``): no redirects
followed, no proxy or ``.netrc`` taken from the environment, the body asked
for as sent (``Accept-Encoding: identity``) and read raw, so a compressed
body can never expand past the limit. ``Authorization: Bearer`` carries the
credential its registration names, resolved before each call
(``credentials``); it is never logged and never part of an error.

The body is streamed and checked as it comes: past ``max_bytes`` the call
stops (``SOURCE_TOO_LARGE``; a declared ``Content-Length`` over the limit
stops it before any byte is read); the first bytes must be of the declared
type by the upload door's rule (``quire.typesniff``; ``TYPE_MISMATCH``); the sha256 is
computed on the way. A JSON body (at most ``max_bytes``) is held in memory,
to be normalised before anything is stored; any other body is written, as it
streams, to a temporary blob of the validator (sealed like every blob), which
the caller promotes or which is removed on every other path, so a refused,
oversized, truncated or timed-out fetch leaves no temporary file.

How each answer decides is in ``errors``.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import quote

import httpx
from opentelemetry import trace

from quire.blobstore import BlobStore, BlobWriter
from quire.egress import EgressPolicy, guarded_transport, was_refused
from quire.errors import Rejected, SystemFailure, TransientError
from quire.reasons import ReasonCode
from quire.type import job_pb2
from quire.typesniff import JSON, SNIFF_BYTES, looks_like
from quire.validator.sources.errors import SourceCallFailed
from quire.validator.sources.settings import SourceSettings

__all__ = ["SourceCall", "FetchedBody", "SourceFetcher", "source_client", "source_url"]

USER_AGENT = "quire-validator"


def source_client(settings: SourceSettings, egress: EgressPolicy) -> httpx.AsyncClient:
    """The process's client for every source system (close it with ``aclose``):
    it connects only to addresses ``egress`` allows, checked on every connection."""
    limits = httpx.Limits(
        max_connections=settings.max_connections,
        max_keepalive_connections=max(1, settings.max_connections // 4),
    )
    return httpx.AsyncClient(
        follow_redirects=False,
        trust_env=False,
        timeout=httpx.Timeout(settings.default_timeout_seconds),
        transport=guarded_transport(egress, limits=limits),
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
    )


def source_url(base_url: str, key: str) -> str:
    """``{base_url}/{key}``, the key quoted but for its slashes. A key with a
    ``.`` or ``..`` segment (which would name another path) names no record."""
    if any(segment in (".", "..") for segment in key.split("/")):
        raise Rejected(ReasonCode.SOURCE_NOT_FOUND, "no record can have this key")
    return f"{base_url.rstrip('/')}/{quote(key, safe='/')}"


@dataclass(frozen=True)
class SourceCall:
    """One source to fetch, as the job's task names it."""

    tenant: str
    position: int
    system: str
    key: str
    content_type: str
    base_url: str
    credential_ref: str
    timeout_seconds: float
    """The system's longest wait for one call (the budget may shorten it)."""
    max_bytes: int
    schema: str

    @classmethod
    def of(
        cls, tenant: str, position: int, fetch: job_pb2.SourceFetch, settings: SourceSettings
    ) -> SourceCall:
        timeout = fetch.timeout.seconds + fetch.timeout.nanos / 1e9
        if timeout <= 0:
            timeout = settings.default_timeout_seconds
        return cls(
            tenant=tenant,
            position=position,
            system=fetch.system,
            key=fetch.key,
            content_type=fetch.content_type,
            base_url=fetch.base_url,
            credential_ref=fetch.credential_ref,
            timeout_seconds=min(timeout, settings.max_timeout_seconds),
            max_bytes=fetch.max_bytes if fetch.max_bytes > 0 else settings.default_max_bytes,
            schema=fetch.schema,
        )


class FetchedBody:
    """What one call brought: its digest and size as sent, and the bytes —
    in memory (``data``, JSON) or in a finished temporary blob (``writer``).
    Use it as a context manager: a temporary blob not promoted is removed."""

    def __init__(
        self, sha256: str, size: int, data: bytes | None, writer: BlobWriter | None
    ) -> None:
        self.sha256 = sha256
        self.size = size
        self.data = data
        self.writer = writer

    def discard(self) -> None:
        if self.writer is not None:
            self.writer.discard()

    def __enter__(self) -> FetchedBody:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if self.writer is not None:
            self.writer.__exit__(None, None, None)  # removes it unless promoted


class _Receiving:
    """The body as it streams in: counted, hashed, sniffed, kept."""

    def __init__(self, call: SourceCall, blobs: BlobStore) -> None:
        self._call = call
        self._blobs = blobs
        self._hash = hashlib.sha256()
        self._held = bytearray()
        """JSON: the whole body; otherwise the first bytes until sniffed."""
        self._in_memory = call.content_type == JSON
        self._sniffed = False
        self.size = 0
        self.writer: BlobWriter | None = None

    @property
    def limit(self) -> int:
        return self._call.max_bytes

    def too_large(self) -> Rejected:
        return Rejected(
            ReasonCode.SOURCE_TOO_LARGE,
            f"the source is larger than its system's limit of {self.limit} bytes",
        )

    def take(self, chunk: bytes) -> None:
        if self.size + len(chunk) > self.limit:
            raise self.too_large()
        self.size += len(chunk)
        self._hash.update(chunk)
        if self.writer is not None:
            self.writer.write(chunk)
            return
        self._held += chunk
        if not self._sniffed and len(self._held) >= SNIFF_BYTES:
            self._sniff()

    def _sniff(self) -> None:
        if not looks_like(self._call.content_type, bytes(self._held[:SNIFF_BYTES])):
            raise Rejected(
                ReasonCode.TYPE_MISMATCH, "the first bytes are not of the declared content type"
            )
        self._sniffed = True
        if self._in_memory:
            return
        # Made on the loop, never in a thread a timeout could abandon it in:
        # the tenant's data key was unwrapped (off the loop) before the call.
        self.writer = self._blobs.writer(self._call.tenant, max_bytes=self._call.max_bytes)
        self.writer.write(bytes(self._held))
        self._held.clear()

    async def finish(self) -> FetchedBody:
        if not self._sniffed:
            self._sniff()
        writer, self.writer = self.writer, None
        if writer is None:
            return FetchedBody(self._hash.hexdigest(), self.size, bytes(self._held), None)
        try:
            await asyncio.to_thread(writer.finish)  # fsync
        except BaseException:
            writer.discard()
            raise
        return FetchedBody(self._hash.hexdigest(), self.size, None, writer)

    def discard(self) -> None:
        if self.writer is not None:
            self.writer.discard()
            self.writer = None


def _check_status(status: int) -> None:
    if status == 200:
        return
    if status in (404, 410):
        raise Rejected(
            ReasonCode.SOURCE_NOT_FOUND, f"the source system has no such record (HTTP {status})"
        )
    if status in (401, 403):
        raise SystemFailure(
            ReasonCode.SOURCE_REFUSED, f"the source system refused the credential (HTTP {status})"
        )
    if status in (408, 429) or status >= 500:
        raise SourceCallFailed("error", f"the source system answered HTTP {status}")
    # A redirect, another 4xx, a 2xx without the record: retrying will not change it.
    raise SystemFailure(ReasonCode.SOURCE_REFUSED, f"the source system answered HTTP {status}")


class SourceFetcher:
    """Makes one call to a source system for one source, checking the body as
    it comes; a body not handed over is removed."""

    def __init__(self, client: httpx.AsyncClient, blobs: BlobStore) -> None:
        self._client = client
        self._blobs = blobs

    async def fetch(self, call: SourceCall, timeout: float, token: str | None) -> FetchedBody:
        """One call, bounded by ``timeout`` seconds from the first byte sent to
        the last byte read, with ``token`` (``credentials.resolve_credential``
        of the call's reference) as its bearer credential. Raises as
        ``errors`` says."""
        url = source_url(call.base_url, call.key)
        headers = {"Accept": call.content_type or "*/*"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if call.content_type != JSON:
            # Streamed to a temporary blob: its data key first, off the loop
            # (unwrapping it may reach a token), as admission does for uploads.
            await asyncio.to_thread(self._blobs.keys.for_writing, call.tenant)
        receiving = _Receiving(call, self._blobs)
        try:
            await self._bounded(url, headers, timeout, receiving)
            return await receiving.finish()  # the fsync is the store's time, not the call's
        finally:
            receiving.discard()  # a body not handed over is removed

    async def _bounded(
        self, url: str, headers: dict[str, str], timeout: float, receiving: _Receiving
    ) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._call(url, headers, timeout, receiving)
        except TimeoutError:
            raise SourceCallFailed("timeout", f"no complete answer within {timeout:.1f}s") from None
        except httpx.PoolTimeout:
            # Every connection of this process busy: not the system's failure,
            # so no breaker counts it; the delivery is retried later.
            raise TransientError(
                ReasonCode.SOURCE_UNAVAILABLE, "no free connection to source systems"
            ) from None
        except httpx.TimeoutException:
            raise SourceCallFailed("timeout", f"no complete answer within {timeout:.1f}s") from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL):
            raise SystemFailure(
                ReasonCode.SOURCE_REFUSED, "the source system's address is not usable"
            ) from None
        except httpx.HTTPError as error:
            if was_refused(error):
                raise SystemFailure(
                    ReasonCode.SOURCE_REFUSED,
                    "the source system resolves to an address Quire does not call",
                ) from None
            # Connection refused or reset, a body cut short: the type only, as
            # the text may quote the server.
            raise SourceCallFailed("error", f"the call failed ({type(error).__name__})") from None

    async def _call(
        self, url: str, headers: dict[str, str], timeout: float, receiving: _Receiving
    ) -> None:
        async with self._client.stream(
            "GET", url, headers=headers, timeout=httpx.Timeout(timeout)
        ) as response:
            trace.get_current_span().set_attribute(
                "http.response.status_code", response.status_code
            )
            _check_status(response.status_code)
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise SystemFailure(
                    ReasonCode.SOURCE_REFUSED, "the source system sent an encoded body"
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > receiving.limit:
                raise receiving.too_large()
            async for chunk in response.aiter_raw():
                receiving.take(chunk)
