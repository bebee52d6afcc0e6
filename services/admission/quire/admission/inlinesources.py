"""Sources carried inside a SubmitJob, so that a small packet costs one call.

Each inline source goes through the upload gate exactly as an upload would
(``uploads.UploadGate``: the declared digest, size and type, the tenant's
ceiling and storage quota, content addressing), fed as an upload's messages
from the request's own bytes. Cheap refusals come first and keep nothing:
the inline sources together within the limit, and each one named by a
manifest item. A refusal names the inline source it is about
(``inline_sources[i]...``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from quire.admission.tenants import Tenant
from quire.admission.uploads import UploadGate
from quire.admission.v1 import admission_service_pb2 as pb
from quire.errors import FieldViolation, InvalidInput, QuireError
from quire.reasons import ReasonCode

__all__ = ["InlineSources"]

CHUNK_BYTES = 256 * 1024
"""The pieces an inline source is fed to the gate in (its own upload chunk size)."""


async def _as_upload(source: pb.InlineSource) -> AsyncIterator[pb.UploadSourceRequest]:
    yield pb.UploadSourceRequest(header=source.header)
    content = source.content
    for start in range(0, len(content), CHUNK_BYTES):
        yield pb.UploadSourceRequest(chunk=content[start : start + CHUNK_BYTES])


class InlineSources:
    """Keeps a SubmitJob's inline sources, or refuses the request."""

    def __init__(self, gate: UploadGate, *, limit_bytes: int) -> None:
        self._gate = gate
        self._limit = limit_bytes

    async def keep(self, tenant: Tenant, request: pb.SubmitJobRequest) -> None:
        """Store every inline source of ``request`` under its digest, or raise
        why not (the gate's own reasons for an upload, or this module's)."""
        sources = request.inline_sources
        if not sources:
            return
        self._check(request)
        # One after another: a tenant's open uploads are bounded by the gate,
        # and a request's few small sources gain little from overlapping.
        for index, source in enumerate(sources):
            try:
                await self._gate.receive(tenant, _as_upload(source))
            except QuireError as refused:
                raise _about(index, refused) from None

    def _check(self, request: pb.SubmitJobRequest) -> None:
        total = sum(len(source.content) for source in request.inline_sources)
        if total > self._limit:
            raise InvalidInput(
                ReasonCode.INLINE_SOURCES_TOO_LARGE,
                f"inline sources over the {self._limit}-byte limit in all; upload them",
                (FieldViolation("inline_sources", "over the inline limit"),),
            )
        named = {item.sha256 for item in request.manifest.items if item.sha256}
        for index, source in enumerate(request.inline_sources):
            if source.header.sha256 not in named:
                raise InvalidInput(
                    ReasonCode.INLINE_SOURCE_UNUSED,
                    "an inline source is named by no manifest item",
                    (
                        FieldViolation(
                            f"inline_sources[{index}].header.sha256", "not in the manifest"
                        ),
                    ),
                )


def _about(index: int, refused: QuireError) -> QuireError:
    """The gate's refusal, its fields named within ``inline_sources[index]``."""
    if not isinstance(refused, InvalidInput):
        return refused
    fields = tuple(
        FieldViolation(
            f"inline_sources[{index}].{violation.field}", violation.description, violation.reason
        )
        for violation in refused.violations
    ) or (FieldViolation(f"inline_sources[{index}]", refused.message),)
    return InvalidInput(refused.reason, refused.message, fields)
