"""What the uploads open in this process may hold, and who holds it.

An open upload costs a handler, a descriptor and a temporary file that grows
to its declared size. So that a tenant cannot take all of that from the
others, every upload takes a slot before its header is read and reserves its
declared size when the header arrives; both are refused (``Overloaded``,
RESOURCE_EXHAUSTED with a retry hint and the limit passed) before anything is
written:

- ``TENANT_UPLOADS_EXCEEDED``: the tenant has ``max_tenant_uploads`` open;
- ``UPLOADS_IN_FLIGHT_EXCEEDED``: the process has ``max_uploads_in_flight``
  open, or the declared bytes of all open uploads would pass
  ``upload_bytes_in_flight``;
- ``TENANT_TEMP_SHARE_EXCEEDED``: the tenant's declared bytes would pass
  ``tenant_upload_share_bytes``, its share of the temporary space.

A slot and its reservation are returned by ``UploadSlot.close``, which the
gate calls on every path (stored, refused, timed out, caller gone): it is a
context manager. The limits are per process, like the descriptors and the
temporary space they protect; with several admission replicas a tenant may
hold that many on each. Used from the event loop only, so no lock is needed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from types import TracebackType

from quire.admission.settings import AdmissionSettings
from quire.errors import Overloaded, QuotaViolation
from quire.reasons import ReasonCode

__all__ = ["UploadLedger", "UploadSlot", "UploadUsage"]


@dataclass(frozen=True)
class UploadUsage:
    """What is held right now (for logs, metrics and tests)."""

    uploads: int
    reserved_bytes: int


class UploadLedger:
    """Counts open uploads and their declared bytes, per tenant and in total."""

    def __init__(self, settings: AdmissionSettings) -> None:
        self._settings = settings
        self._uploads: Counter[str] = Counter()
        self._bytes: Counter[str] = Counter()

    def usage(self, tenant: str | None = None) -> UploadUsage:
        if tenant is not None:
            return UploadUsage(self._uploads[tenant], self._bytes[tenant])
        return UploadUsage(self._uploads.total(), self._bytes.total())

    def open(self, tenant: str) -> UploadSlot:
        """Take a slot for one upload of ``tenant``, or refuse it."""
        settings = self._settings
        if self._uploads[tenant] >= settings.max_tenant_uploads:
            raise self._refusal(
                ReasonCode.TENANT_UPLOADS_EXCEEDED,
                "tenant:concurrent_uploads",
                f"{self._uploads[tenant]} uploads open, the tenant's limit is "
                f"{settings.max_tenant_uploads}",
            )
        if self._uploads.total() >= settings.max_uploads_in_flight:
            raise self._refusal(
                ReasonCode.UPLOADS_IN_FLIGHT_EXCEEDED,
                "process:concurrent_uploads",
                f"{self._uploads.total()} uploads open, the limit is "
                f"{settings.max_uploads_in_flight}",
            )
        self._uploads[tenant] += 1
        return UploadSlot(self, tenant)

    def reserve(self, tenant: str, size: int) -> None:
        """Reserve ``size`` declared bytes for one of ``tenant``'s open uploads (see ``UploadSlot``)."""
        settings = self._settings
        held = self._bytes[tenant]
        if held + size > settings.tenant_upload_share_bytes:
            raise self._refusal(
                ReasonCode.TENANT_TEMP_SHARE_EXCEEDED,
                "tenant:upload_bytes",
                f"{held} declared bytes in flight; {size} more would pass the tenant's "
                f"share of {settings.tenant_upload_share_bytes}",
            )
        total = self._bytes.total()
        if total + size > settings.upload_bytes_in_flight:
            raise self._refusal(
                ReasonCode.UPLOADS_IN_FLIGHT_EXCEEDED,
                "process:upload_bytes",
                f"{total} declared bytes in flight; {size} more would pass "
                f"{settings.upload_bytes_in_flight}",
            )
        self._bytes[tenant] += size

    def release(self, tenant: str, size: int) -> None:
        """Give back one upload slot of ``tenant`` and the bytes it reserved."""
        self._bytes[tenant] -= size
        self._uploads[tenant] -= 1
        # Drop emptied entries so the counters do not grow with every tenant ever seen.
        if self._uploads[tenant] <= 0:
            del self._uploads[tenant]
        if self._bytes[tenant] <= 0:
            del self._bytes[tenant]

    def _refusal(self, reason: ReasonCode, subject: str, description: str) -> Overloaded:
        return Overloaded(
            reason,
            "too many uploads in flight; try again later",
            retry_after=self._settings.retry_after_seconds,
            quota=(QuotaViolation(subject, description),),
        )


class UploadSlot:
    """One open upload's place in the ledger; ``close`` gives everything back once."""

    def __init__(self, ledger: UploadLedger, tenant: str) -> None:
        self._ledger = ledger
        self._tenant = tenant
        self._reserved = 0
        self._closed = False

    def reserve(self, size: int) -> None:
        """Reserve the declared size of this upload, or refuse it (nothing reserved)."""
        if self._closed or self._reserved:
            raise RuntimeError("an upload reserves its declared size once, while open")
        self._ledger.reserve(self._tenant, size)
        self._reserved = size

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._ledger.release(self._tenant, self._reserved)

    def __enter__(self) -> UploadSlot:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()
