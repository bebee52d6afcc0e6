"""Tenants' notification secrets, kept sealed under the tenant's data key.

A secret is 32 random bytes written as 64 hex digits; the HMAC key is that
text (``quire.notifysign``). It is shown to the tenant once and stored only
sealed (``quire.sealing``, the format blobs use, so the sealed bytes name the
tenant and its key version, and fail to open under any other tenant). A
crypto-shredded tenant's secret is unreadable like its blobs.
"""

from __future__ import annotations

import io
import secrets

from quire.datakeys import DataKeys
from quire.errors import PermanentError
from quire.reasons import ReasonCode
from quire.sealing import Sealer, open_sealed, read_header

__all__ = ["NotificationSecrets", "SECRET_BYTES"]

SECRET_BYTES = 32


class NotificationSecrets:
    """Makes, seals and opens notification secrets (blocking: call off the event loop)."""

    def __init__(self, keys: DataKeys) -> None:
        self._keys = keys

    def make(self, tenant: str) -> tuple[str, bytes]:
        """A new secret and its sealed form."""
        secret = secrets.token_hex(SECRET_BYTES)
        version, key = self._keys.for_writing(tenant)
        sealer = Sealer(tenant, version, key)
        return secret, sealer.update(secret.encode()) + sealer.finish()

    def open(self, tenant: str, sealed: bytes) -> str:
        """The secret sealed in ``sealed``; DIGEST_MISMATCH if it is not ``tenant``'s."""
        handle = io.BytesIO(sealed)
        header = read_header(handle)
        if header.tenant != tenant:
            raise PermanentError(ReasonCode.DIGEST_MISMATCH, "sealed secret of another tenant")
        key = self._keys.for_reading(tenant, header.key_version)
        return b"".join(open_sealed(handle, header, key)).decode()
