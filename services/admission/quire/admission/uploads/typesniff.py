"""Magic bytes at the door: the first bytes of an upload must look like the
type it declares (``quire.typesniff``, the rule every door shares), or it is
refused (INVALID_ARGUMENT, ``TYPE_MISMATCH``) before a temporary file is
opened, and so before any job can name it."""

from __future__ import annotations

from quire.errors import FieldViolation, InvalidInput
from quire.reasons import ReasonCode
from quire.typesniff import SNIFF_BYTES, looks_like

__all__ = ["SNIFF_BYTES", "check_declared_type", "looks_like"]


def check_declared_type(content_type: str, head: bytes) -> None:
    """Refuse (``TYPE_MISMATCH``) an upload whose first bytes are not its declared type."""
    if not looks_like(content_type, head):
        raise InvalidInput(
            ReasonCode.TYPE_MISMATCH,
            "the first bytes are not of the declared content type",
            (FieldViolation("header.content_type", "does not match the content"),),
        )
