"""Wrapped data keys in a replicated JetStream key-value bucket, so that every
replica of every service sees the same ring without a shared disk.

Keys are ``<tenant>.v<version>`` and ``<tenant>.shredded``, the tenant
base64url-encoded (a key-value key allows few characters). Creation is
create-once with JetStream's expected-last-subject-sequence: of two
replicas racing to make a tenant's first key, one wins and both use it.
Reads go to the stream leader (``STREAM.MSG.GET``, not a direct get that a
lagging follower may answer), so a key just made is seen by everyone.
"""

from __future__ import annotations

import base64
import binascii

import nats.js.errors
from nats.js import api

from quire.datakeys import check_tenant
from quire.natsport import NatsPort

__all__ = ["KEYRING_BUCKET", "NatsKeyRing", "keyring_config"]

KEYRING_BUCKET = "QUIRE_KEYRING"
_STREAM = f"KV_{KEYRING_BUCKET}"
_PREFIX = f"$KV.{KEYRING_BUCKET}."
_SHREDDED = "shredded"
EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code when an expected last sequence does not hold."""
_OPERATION = "KV-Operation"
_REMOVED = ("DEL", "PURGE")


def keyring_config(replicas: int) -> api.KeyValueConfig:
    return api.KeyValueConfig(
        bucket=KEYRING_BUCKET, history=1, storage=api.StorageType.FILE, replicas=replicas
    )


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

    def _last(self, subject: str) -> tuple[int, bytes | None]:
        """(sequence, value) of the subject's last entry; value None when it
        was removed; (0, None) when it never existed."""

        async def get() -> tuple[int, bytes | None]:
            try:
                msg = await self._port.js.get_msg(_STREAM, subject=subject)
            except nats.js.errors.NotFoundError:
                return 0, None
            removed = (msg.headers or {}).get(_OPERATION) in _REMOVED
            return msg.seq or 0, None if removed else (msg.data or b"")

        return self._port.run(get)

    def _publish(self, subject: str, value: bytes, headers: dict[str, str] | None = None) -> bool:
        async def publish() -> bool:
            try:
                await self._port.js.publish(subject, value, headers=headers)
            except nats.js.errors.APIError as error:
                if error.err_code == WRONG_LAST_SEQUENCE:
                    return False
                raise
            return True

        return self._port.run(publish)

    def exists(self, tenant: str, version: int) -> bool:
        return self.read(tenant, version) is not None

    def read(self, tenant: str, version: int) -> bytes | None:
        return self._last(self._subject(tenant, f"v{version}"))[1]

    def create(self, tenant: str, version: int, record: bytes) -> bool:
        subject = self._subject(tenant, f"v{version}")
        while True:
            sequence, value = self._last(subject)
            if value is not None:
                return False
            expected = {EXPECTED_LAST_SUBJECT_SEQUENCE: str(sequence)}
            if self._publish(subject, record, expected):
                return True

    def replace(self, tenant: str, version: int, record: bytes) -> None:
        self._publish(self._subject(tenant, f"v{version}"), record)

    def remove(self, tenant: str, version: int) -> None:
        headers = {_OPERATION: "PURGE", api.Header.ROLLUP: "sub"}
        self._publish(self._subject(tenant, f"v{version}"), b"", headers)

    def _entries(self) -> dict[str, list[str]]:
        """Each tenant's live entries (``v1``, ``shredded``), from the stream's subjects."""

        async def subjects() -> dict[str, int]:
            info = await self._port.js.stream_info(_STREAM, subjects_filter=f"{_PREFIX}>")
            return dict(info.state.subjects or {})

        found: dict[str, list[str]] = {}
        for subject in self._port.run(subjects):
            token, _, entry = subject.removeprefix(_PREFIX).partition(".")
            tenant = _decode(token)
            if tenant is not None and self._last(subject)[1] is not None:
                found.setdefault(tenant, []).append(entry)
        return found

    def versions(self, tenant: str) -> list[int]:
        entries = self._entries().get(tenant, [])
        return sorted(int(e[1:]) for e in entries if e.startswith("v") and e[1:].isdigit())

    def tenants(self) -> list[str]:
        return sorted(self._entries())

    def is_shredded(self, tenant: str) -> bool:
        return self._last(self._subject(tenant, _SHREDDED))[1] is not None

    def mark_shredded(self, tenant: str, stamp: bytes) -> None:
        self._publish(self._subject(tenant, _SHREDDED), stamp)
