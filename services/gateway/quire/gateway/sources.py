"""Uploading a source over HTTP, streamed through admission's upload gate.

The body is never held whole: each piece the server reads is forwarded as
one or more ``UploadSource`` chunks as it arrives, after a header declaring
the path's sha256, the ``Content-Length`` and the ``Content-Type``. The
gate is admission's: declared length, digest, type, the tenant's ceiling,
quotas and pace. Should more bytes come than were declared, the gateway
forwards the first byte past the declaration, so that admission refuses the
upload (SIZE_EXCEEDS_DECLARATION, 413), and stops reading.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse

from quire.admission.v1 import admission_service_pb2 as pb
from quire.declarations import check_declared_digest, check_declared_size
from quire.errors import FieldViolation, InvalidInput
from quire.gateway.admission import Admission, admission_of, caller_metadata
from quire.gateway.documents import source_document
from quire.gateway.problems import problem_responses
from quire.gateway.schemas import SourceDocument
from quire.gateway.uploadstream import stream_upload
from quire.reasons import ReasonCode

__all__ = ["router"]

router = APIRouter(tags=["sources"])
BINARY = {"schema": {"type": "string", "format": "binary"}}


def declared_length(value: str | None) -> int:
    """``Content-Length`` as the upload's declared size; required, positive."""
    if value is None or not value.isdigit():
        raise InvalidInput(
            ReasonCode.UPLOAD_HEADER_MISSING,
            "Content-Length is required: the declared size of the upload",
            (FieldViolation("Content-Length", "required, a whole number of bytes"),),
        )
    check_declared_size(int(value), "Content-Length")
    return int(value)


def media_type(value: str | None) -> str:
    """The media type of ``Content-Type`` without its parameters."""
    return (value or "").split(";", 1)[0].strip().lower()


async def upload_messages(
    header: pb.SourceHeader, body: AsyncIterator[bytes], chunk_bytes: int
) -> AsyncIterator[pb.UploadSourceRequest]:
    """The header, then the body in chunks of at most ``chunk_bytes``, ending
    with the first byte past the declared size if the body goes on."""
    yield pb.UploadSourceRequest(header=header)
    remaining = header.size_bytes
    async for piece in body:
        if len(piece) > remaining:
            piece = piece[: remaining + 1]  # the first byte too many: admission refuses
        for start in range(0, len(piece), chunk_bytes):
            yield pb.UploadSourceRequest(chunk=piece[start : start + chunk_bytes])
        remaining -= len(piece)
        if remaining < 0:
            return


@router.put(
    "/v1/sources/{sha256}",
    status_code=201,
    response_model=SourceDocument,
    summary="Upload a source under its sha256 (streamed; Content-Length required).",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/pdf": BINARY, "application/json": BINARY},
        }
    },
    responses={
        201: {
            "description": "Stored (or already stored) under its digest.",
            "headers": {
                "Location": {"description": "The source's URL.", "schema": {"type": "string"}}
            },
        },
        **problem_responses(411, 413, 415),
    },
)
async def upload_source(
    sha256: str,
    request: Request,
    admission: Annotated[Admission, Depends(admission_of)],
    content_length: Annotated[str | None, Header(include_in_schema=False)] = None,
    content_type: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> JSONResponse:
    # What needs no settings is refused here, before the stream opens: a
    # refusal that reaches the gateway while it is still writing can be
    # misreported by grpcio (see ``quire.gateway.uploadstream``).
    check_declared_digest(sha256, "sha256")
    header = pb.SourceHeader(
        sha256=sha256,
        size_bytes=declared_length(content_length),
        content_type=media_type(content_type),
    )
    messages = upload_messages(header, request.stream(), admission.upload_chunk_bytes)
    source = await stream_upload(admission.stub, messages, caller_metadata(request))
    document = source_document(source)
    return JSONResponse(
        document.model_dump(mode="json"),
        status_code=201,
        headers={"Location": f"/v1/sources/{document.sha256}"},
    )
