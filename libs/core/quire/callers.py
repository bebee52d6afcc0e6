"""Who is calling: a service's proof of identity on each internal gRPC call.

A service signs every call it makes to another service with its Ed25519
identity key (``quire.identity``) and sends the proof in the call's metadata:

    quire-caller: <service>.<unix-ms>.<nonce>.<signature>

The signature (URL-safe base64, unpadded) covers
``quire-call-v1 NUL <method> NUL <unix-ms> NUL <nonce>``. A proof is good for
one method, within ``WINDOW_SECONDS`` of its time, and once: the receiving
process remembers the nonces it has accepted until their proofs expire.

Why a signature and not mutual TLS alone: the services share one client
certificate (``quire.tls``), which says "some Quire process", not which one,
and the embedded stack runs in plaintext on loopback. The proof says which
service, the same way on either. It does not cover the request's body; with
TLS off, someone who can read a call on the wire could race it with one
other request to the same method within the window.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import grpc

from quire.errors import TransientError, Unauthenticated
from quire.identity import ServiceIdentity, TrustStore
from quire.reasons import ReasonCode

__all__ = [
    "PROOF_HEADER",
    "WINDOW_SECONDS",
    "prove",
    "CallerProofInterceptors",
    "CallerVerifier",
    "ClockSkew",
]

PROOF_HEADER = "quire-caller"
WINDOW_SECONDS = 60.0
"""A proof is accepted this long either side of its time (clock skew
included): the clock skew tolerated between two services. A trusted
service's proof beyond it is refused as ``CLOCK_SKEW`` (UNAVAILABLE: the
call may pass once the clocks agree), a forged or malformed one as
UNAUTHENTICATED."""
SKEW_LOG_SECONDS = 60.0
"""A caller refused for its clock is logged at most this often."""
MAX_REMEMBERED = 1_000_000
"""Nonces held for replay detection; beyond this, calls are refused (UNAVAILABLE)."""
log = logging.getLogger(__name__)
_CONTEXT = b"quire-call-v1"
_MAX_NONCE = 64


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signed(method: str, millis: int, nonce: str) -> bytes:
    return b"\0".join((_CONTEXT, method.encode(), str(millis).encode(), nonce.encode()))


def prove(
    identity: ServiceIdentity, method: str, *, now: float | None = None, nonce: str | None = None
) -> str:
    """The ``quire-caller`` value for one call of ``method`` (``/pkg.Service/Method``)."""
    millis = int((time.time() if now is None else now) * 1000)
    nonce = nonce or _b64(secrets.token_bytes(16))
    signature = identity.sign(_signed(method, millis, nonce))
    return f"{identity.service}.{millis}.{nonce}.{_b64(signature)}"


class _ProofInjector:
    def __init__(self, identity: ServiceIdentity) -> None:
        self._identity = identity

    def _with_proof(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        method = details.method
        name = method.decode() if isinstance(method, bytes) else str(method)
        metadata = [(k, v) for k, v in (details.metadata or ()) if k != PROOF_HEADER]
        metadata.append((PROOF_HEADER, prove(self._identity, name)))
        return grpc.aio.ClientCallDetails(
            method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _UnaryUnary(_ProofInjector, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._with_proof(details), request)


class _UnaryStream(_ProofInjector, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._with_proof(details), request)


class _StreamUnary(_ProofInjector, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._with_proof(details), requests)


class _StreamStream(_ProofInjector, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._with_proof(details), requests)


def CallerProofInterceptors(  # noqa: N802 - reads as a value
    identity: ServiceIdentity,
) -> list[grpc.aio.ClientInterceptor]:
    """Client interceptors that sign every call on a channel as ``identity``."""
    return [
        _UnaryUnary(identity),
        _UnaryStream(identity),
        _StreamUnary(identity),
        _StreamStream(identity),
    ]


class ClockSkew(TransientError):
    """A trusted service's proof made at a time too far from this service's
    clock: ``CLOCK_SKEW`` (UNAVAILABLE), retried by stages, and never
    admitted (``WINDOW_SECONDS`` is the skew tolerated)."""

    def __init__(self, message: str) -> None:
        super().__init__(ReasonCode.CLOCK_SKEW, message)


class CallerVerifier:
    """Checks ``quire-caller`` proofs against the trusted services' public keys."""

    def __init__(
        self,
        trust: TrustStore,
        *,
        window_seconds: float = WINDOW_SECONDS,
        max_remembered: int = MAX_REMEMBERED,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._trust = trust
        self._window = window_seconds
        self._max = max_remembered
        self._clock = clock
        # (service, nonce) -> when it may be forgotten; insertion order is expiry order.
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._skew_logged: dict[str, float] = {}

    def verify(self, proof: str, method: str) -> str:
        """The calling service's name; UNAUTHENTICATED for anything but a fresh,
        trusted proof made for ``method``."""
        parts = proof.split(".")
        if len(parts) != 4:
            raise Unauthenticated("malformed caller proof")
        service, millis_text, nonce, signature_text = parts
        if not millis_text.isdigit() or len(millis_text) > 15 or not 0 < len(nonce) <= _MAX_NONCE:
            raise Unauthenticated("malformed caller proof")
        try:
            signature = _unb64(signature_text)
        except (binascii.Error, ValueError):
            raise Unauthenticated("malformed caller proof") from None
        if not self._trust.verify(service, signature, _signed(method, int(millis_text), nonce)):
            raise Unauthenticated("caller proof not from a trusted service")
        now = self._clock()
        skew = int(millis_text) / 1000 - now
        if abs(skew) > self._window:
            # Signed by a trusted service, only at another time: one host's
            # clock is wrong (a replay this old is refused all the same).
            self._report_skew(service, skew)
            raise ClockSkew(
                f"the caller's clock is {skew:+.0f} s from this service's;"
                f" at most {self._window:.0f} s is tolerated"
            )
        self._remember((service, nonce), now)
        return service

    def _report_skew(self, service: str, skew: float) -> None:
        """Log a caller refused for its clock, at most once a minute per caller."""
        now = time.monotonic()
        if now - self._skew_logged.get(service, -math.inf) < SKEW_LOG_SECONDS:
            return
        self._skew_logged[service] = now
        log.warning(
            "calls from %s refused: its clock is %+.0f s from this service's"
            " (at most %.0f s tolerated); one of the two hosts' clocks is wrong",
            service,
            skew,
            self._window,
        )

    @property
    def remembered(self) -> int:
        """Nonces held for replay detection now (bounded by the call rate times two windows)."""
        return len(self._seen)

    def _remember(self, key: tuple[str, str], now: float) -> None:
        while self._seen and next(iter(self._seen.values())) < now:
            self._seen.popitem(last=False)
        if key in self._seen:
            raise Unauthenticated("caller proof already used")
        if len(self._seen) >= self._max:
            raise TransientError(ReasonCode.DEPENDENCY_UNAVAILABLE, "too many calls; try again")
        # A proof accepted now is at most one window old or young: it cannot
        # pass the time check after two windows from now.
        self._seen[key] = now + 2 * self._window
