"""Admission's temporary-space rule: shed new work before the disk fills.

Uploads write into the blob store's temporary space, and every accepted job
makes the stages write more. When the whole pipeline's temporary bytes reach
``shed_fraction`` of ``QUIRE_TEMP_SPACE_LIMIT_BYTES``, or the disk holding
them has less free than ``QUIRE_TEMP_FREE_RESERVE_BYTES``, new uploads and
submissions are refused with RESOURCE_EXHAUSTED (``TEMP_SPACE_LOW``) and a
retry hint. The check reads the monitor's last reading, taken in the
background, never a scan per request; it runs before anything is written, so
work already accepted goes on untouched.
"""

from __future__ import annotations

from quire.errors import Overloaded, QuotaViolation
from quire.reasons import ReasonCode
from quire.settings import TempSpaceSettings
from quire.tempspace import TempSpaceMonitor, TempUsage

__all__ = ["TempSpaceGuard"]


class TempSpaceGuard:
    """Refuses new uploads and jobs while temporary space is low, from the
    monitor's last reading; work already accepted is never touched."""

    def __init__(
        self,
        monitor: TempSpaceMonitor,
        settings: TempSpaceSettings,
        *,
        retry_after_seconds: float,
    ) -> None:
        self._monitor = monitor
        self._settings = settings
        self._retry_after = retry_after_seconds

    @property
    def ceiling_bytes(self) -> int:
        """Temporary bytes at which new work is refused."""
        return int(self._settings.space_limit_bytes * self._settings.shed_fraction)

    def check(self) -> None:
        """Refuse new work (``Overloaded``) while temporary space is low."""
        reading = self._monitor.reading
        if reading is None:
            return  # not measured yet: the service measures once before it serves
        violation = self._violation(reading)
        if violation is not None:
            raise Overloaded(
                ReasonCode.TEMP_SPACE_LOW,
                "temporary space is low; try again later",
                retry_after=self._retry_after,
                quota=(violation,),
            )

    def _violation(self, reading: TempUsage) -> QuotaViolation | None:
        if reading.total_bytes >= self.ceiling_bytes:
            return QuotaViolation(
                "pipeline:temp_space_bytes",
                f"{reading.total_bytes} temporary bytes, at or over {self.ceiling_bytes}",
            )
        reserve = self._settings.free_reserve_bytes
        if reading.free_bytes < reserve:
            return QuotaViolation(
                "disk:free_bytes",
                f"{reading.free_bytes} bytes free, under the {reserve}-byte reserve",
            )
        return None
