"""Wrapped data keys in a replicated JetStream key-value bucket, so that every
replica of every service sees the same ring without a shared disk.

Every entry is written once and never overwritten. A wrapped key lives at
``<tenant>.v<version>.w<wrap>``, the tenant base64url-encoded (a key-value
key allows few characters): admission makes ``w1`` (the only wrap a service
may create, ``quire.natsauth``), and a KEK rotation (``quire keys rewrap``)
adds ``w2``, ``w3``... beside it; readers take the newest. A tenant's
``<tenant>.shredded`` tombstone, and erasing its wrapped keys, belong to the
``keeper`` login alone.

The stream holds one message a subject and refuses a second
(``discard_new_per_subject``): no publish — a put, a delete or purge
marker — can replace an entry, and rollup headers are refused outright.
Erasing is a stream purge of the entry's subjects, which only the keeper's
login may request. Of two creators racing for a tenant's first key, the server keeps
one and both use it. Reads go to the stream leader (``STREAM.MSG.GET``,
not a direct get that a lagging follower may answer), so a key just made
is seen by everyone. Entries of the earlier layout (``<tenant>.v<version>``,
replaced in place) are still read.
"""

from __future__ import annotations

import base64
import binascii

import nats.js.errors
from nats.js import api

from quire.datakeys import check_tenant
from quire.natsport import NatsPort
from quire.streamsafety import create_entry, create_only_stream

__all__ = ["KEYRING_BUCKET", "NatsKeyRing", "keyring_config"]

KEYRING_BUCKET = "QUIRE_KEYRING"
_STREAM = f"KV_{KEYRING_BUCKET}"
_PREFIX = f"$KV.{KEYRING_BUCKET}."
_SHREDDED = "shredded"
FIRST_WRAP = 1
_OPERATION = "KV-Operation"
_REMOVED = ("DEL", "PURGE")


def keyring_config(replicas: int) -> api.StreamConfig:
    """The bucket's stream: one message a subject, never replaced or rolled up."""
    # deny_delete as key-value buckets are made: JetStream cannot lift it later.
    return create_only_stream(_STREAM, [f"{_PREFIX}>"], replicas, deny_delete=True)


def _encode(tenant: str) -> str:
    return base64.urlsafe_b64encode(check_tenant(tenant).encode()).decode().rstrip("=")


def _decode(token: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


class NatsKeyRing:
    """The ``WrappedKeyRing`` of the NATS blob backend (``quire.datakeys``)."""

    def __init__(self, port: NatsPort) -> None:
        self._port = port

    def _subject(self, tenant: str, entry: str) -> str:
        return f"{_PREFIX}{_encode(tenant)}.{entry}"

    def _get(self, subject: str, *, first: bool = False) -> tuple[int, str, bytes | None]:
        """(sequence, subject, value) of the last (or first) message on
        ``subject``, which may end in a wildcard; value None when it is a
        removal marker of the earlier layout; (0, "", None) when there is none."""

        async def get() -> tuple[int, str, bytes | None]:
            try:
                if first:
                    msg = await self._port.js.get_msg(_STREAM, seq=1, subject=subject, next=True)
                else:
                    msg = await self._port.js.get_msg(_STREAM, subject=subject)
            except nats.js.errors.NotFoundError:
                return 0, "", None
            removed = (msg.headers or {}).get(_OPERATION) in _REMOVED
            return msg.seq or 0, msg.subject or "", None if removed else (msg.data or b"")

        return self._port.run(get)

    def _newest(self, tenant: str, version: int) -> tuple[int, bytes | None]:
        """(wrap number, record) of the newest wrap of a key; wrap 0 is the
        earlier layout's single entry; (0, None) when there is none."""
        _, subject, value = self._get(self._subject(tenant, f"v{version}.>"))
        if value is not None:
            return _wrap_number(subject), value
        return 0, self._get(self._subject(tenant, f"v{version}"))[2]

    def _publish(self, subject: str, value: bytes) -> bool:
        """Store a new entry; False when the subject holds one already."""
        return self._port.run(lambda: create_entry(self._port.js, subject, value))

    def exists(self, tenant: str, version: int) -> bool:
        return self.read(tenant, version) is not None

    def read(self, tenant: str, version: int) -> bytes | None:
        return self._newest(tenant, version)[1]

    def create(self, tenant: str, version: int, record: bytes) -> bool:
        if self.read(tenant, version) is not None:
            return False
        return self._publish(self._subject(tenant, f"v{version}.w{FIRST_WRAP}"), record)

    def replace(self, tenant: str, version: int, record: bytes) -> None:
        """A new wrap beside the old ones (a KEK rotation); readers take it from now on."""
        while True:
            wrap = self._newest(tenant, version)[0]
            if self._publish(self._subject(tenant, f"v{version}.w{wrap + 1}"), record):
                return

    def remove(self, tenant: str, version: int) -> None:
        """Purge every wrap of the key (the keeper's login only)."""

        async def purge() -> None:
            for pattern in (f"v{version}.>", f"v{version}"):
                await self._port.js.purge_stream(_STREAM, subject=self._subject(tenant, pattern))

        self._port.run(purge)

    def _entries(self) -> dict[str, set[str]]:
        """Each tenant's live entries (``v1``, ``shredded``), from the stream's subjects."""

        async def subjects() -> dict[str, int]:
            info = await self._port.js.stream_info(_STREAM, subjects_filter=f"{_PREFIX}>")
            return dict(info.state.subjects or {})

        found: dict[str, set[str]] = {}
        for subject in self._port.run(subjects):
            token, _, entry = subject.removeprefix(_PREFIX).partition(".")
            tenant = _decode(token)
            if tenant is not None and self._get(subject)[2] is not None:
                found.setdefault(tenant, set()).add(entry.partition(".")[0])
        return found

    def versions(self, tenant: str) -> list[int]:
        entries = self._entries().get(tenant, set())
        return sorted(int(e[1:]) for e in entries if e.startswith("v") and e[1:].isdigit())

    def tenants(self) -> list[str]:
        return sorted(self._entries())

    def is_shredded(self, tenant: str) -> bool:
        return self._get(self._subject(tenant, _SHREDDED))[2] is not None

    def mark_shredded(self, tenant: str, stamp: bytes) -> None:
        self._publish(self._subject(tenant, _SHREDDED), stamp)


def _wrap_number(subject: str) -> int:
    token = subject.rsplit(".", 1)[-1]
    return int(token[1:]) if token.startswith("w") and token[1:].isdigit() else 0
