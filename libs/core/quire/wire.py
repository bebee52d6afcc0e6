"""Provenance of queue messages, independent of the broker.

Every message a service publishes carries a ``Quire-Signature`` header: the
producing service's name and its Ed25519 signature over the subject and the
payload. A consumer believes a message only when the signature verifies
against the trust store *and* the signer is one of the services allowed to
produce on that subject — the validator's key cannot make a sign task, a
stage's key cannot make another stage's events. Anything else is forged: it
is terminated and counted, never acted on.

    quire.work.validate.*     admission (new jobs, re-drives), audit (operator retries)
    quire.work.assemble.*     validator, audit
    quire.work.sign.*         assembler, audit
    quire.work.commit.*       signer, audit
    (and each quire.work.<stage>.<priority>.candidate as its stage's subjects)
    quire.events.<service>    that service (and .batch: one commit's events)
    quire.dead.<stage>        the stage's service, audit (the dead-letter office)
    quire.checkpoints.audit   audit

The signature binds the subject, so a genuine message moved to another subject
does not verify. A genuine message published again is a duplicate, which every
consumer already absorbs (message ids, leases, event ids).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections import Counter
from collections.abc import Mapping

from quire.errors import PermanentError
from quire.identity import ServiceIdentity, TrustStore
from quire.pipeline import QUEUED_STAGES, STAGES
from quire.reasons import ReasonCode

__all__ = [
    "SIGNATURE_HEADER",
    "ForgedMessage",
    "WireSigner",
    "WireVerifier",
    "allowed_producers",
    "verified_producer",
]

SIGNATURE_HEADER = "Quire-Signature"
_DOMAIN = b"quire-wire-v1\x00"
_STAGE_PRODUCERS = {
    # A stage's work comes from the stage before it (admission for the first),
    # or from audit (operators' dead-letter retries and re-drives).
    s.name: frozenset({before.service if before else "admission", "audit"})
    for before, s in zip((None, *STAGES), STAGES, strict=False)
}
_DEAD_PRODUCERS = {s.name: frozenset({s.service, "audit"}) for s in QUEUED_STAGES}
_NOBODY: frozenset[str] = frozenset()

log = logging.getLogger(__name__)


def allowed_producers(subject: str) -> frozenset[str]:
    """The services whose signature makes a message on ``subject`` genuine."""
    parts = subject.split(".")
    if len(parts) < 3 or parts[0] != "quire":
        return _NOBODY
    kind, name = parts[1], parts[2]
    if kind == "work" and (len(parts) == 4 or (len(parts) == 5 and parts[4] == "candidate")):
        # quire.work.<stage>.<priority>[.candidate]: a track changes no producer.
        return _STAGE_PRODUCERS.get(name, _NOBODY)
    if kind == "events" and (len(parts) == 3 or (len(parts) == 4 and parts[3] == "batch")):
        return frozenset({name})
    if kind == "dead" and len(parts) == 3:
        return _DEAD_PRODUCERS.get(name, _NOBODY)
    if kind == "checkpoints" and subject == "quire.checkpoints.audit":
        return frozenset({"audit"})
    return _NOBODY


def verified_producer(headers: Mapping[str, str] | None) -> str:
    """The producer named by a message that a :class:`WireVerifier` already accepted."""
    return (headers or {}).get(SIGNATURE_HEADER, "").partition(".")[0]


def _signed_bytes(subject: str, payload: bytes) -> bytes:
    return _DOMAIN + subject.encode() + b"\x00" + payload


class ForgedMessage(PermanentError):
    """A message no trusted producer signed for its subject."""

    def __init__(self, message: str) -> None:
        super().__init__(ReasonCode.FORGED_MESSAGE, message)


class WireSigner:
    """Signs what this service publishes."""

    def __init__(self, identity: ServiceIdentity) -> None:
        self._identity = identity

    @property
    def service(self) -> str:
        return self._identity.service

    def header(self, subject: str, payload: bytes) -> str:
        signature = self._identity.sign(_signed_bytes(subject, payload))
        return f"{self._identity.service}.{base64.b64encode(signature).decode()}"


class WireVerifier:
    """Checks a message's signature and its producer's right to the subject.

    Refusals are counted by subject kind and reason, so an operator can see
    attempts; the count never holds ids or content.
    """

    def __init__(self, trust: TrustStore) -> None:
        self._trust = trust
        self.refused: Counter[str] = Counter()

    def producer(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        *,
        allowed: frozenset[str] | None = None,
    ) -> str:
        """The service that produced this message, or :class:`ForgedMessage`.

        ``allowed`` overrides the producers the subject admits (for data that
        is not a message on a Quire subject, such as a job-gate entry).
        """
        value = (headers or {}).get(SIGNATURE_HEADER, "")
        service, _, encoded = value.partition(".")
        if not service or not encoded:
            raise self._refuse(subject, "unsigned")
        if service not in (allowed_producers(subject) if allowed is None else allowed):
            raise self._refuse(subject, "producer not allowed")
        try:
            signature = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise self._refuse(subject, "bad signature encoding") from None
        if not self._trust.verify(service, signature, _signed_bytes(subject, payload)):
            raise self._refuse(subject, "bad signature")
        return service

    def _refuse(self, subject: str, why: str) -> ForgedMessage:
        kind = ".".join(subject.split(".")[:3])
        self.refused[f"{kind}:{why}"] += 1
        log.warning(
            "forged message on %s refused (%s); %d refused so far",
            kind,
            why,
            sum(self.refused.values()),
        )
        return ForgedMessage(why)
