"""RFC 9457 problem documents: the one place where a gRPC status, a Quire
error or a refused request body becomes an HTTP answer.

A problem carries the same stable reason code as the gRPC status's
``ErrorInfo``, the ``BadRequest`` field violations and the ``RetryInfo``
delay (also as ``Retry-After``). The detail is the status message admission
chose to send, which never holds document content; a bearer token or an
upload's bytes are never echoed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import grpc
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from quire.errors import QuireError
from quire.gateway.schemas import Problem, Violation
from quire.grpcstatus import details_of, status_for
from quire.reasons import ReasonCode

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "http_status",
    "problem_response",
    "install_problem_handlers",
    "problem_responses",
]

PROBLEM_MEDIA_TYPE = "application/problem+json"
DOMAIN = "gateway"

_BY_CODE: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    # The resource's state, not the request, is wrong (an artifact not yet signed).
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
"""gRPC code to HTTP status, as ``google.rpc.Code`` documents it; anything
else (UNKNOWN, INTERNAL, DATA_LOSS) is 500."""

_BY_REASON: dict[str, int] = {
    ReasonCode.SIZE_LIMIT_EXCEEDED: 413,
    ReasonCode.SIZE_EXCEEDS_DECLARATION: 413,
    ReasonCode.UPLOAD_HEADER_MISSING: 411,
    ReasonCode.CONTENT_TYPE_NOT_ALLOWED: 415,
}
"""Reasons HTTP has a more precise status for than their gRPC code's."""

_TITLES: dict[int, str] = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    499: "Client Closed Request",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}

ERROR_STATUSES: tuple[int, ...] = (400, 401, 403, 404, 409, 422, 429, 500, 503, 504)
"""Every route can answer these (any call can be refused, shed or fail)."""


def http_status(code: grpc.StatusCode, reason: str) -> int:
    """The HTTP status for a gRPC status code and its reason code."""
    return _BY_REASON.get(reason) or _BY_CODE.get(code, 500)


def problem_response(
    status: int,
    reason: str,
    detail: str,
    violations: Sequence[Violation] = (),
    retry_after_seconds: float | None = None,
) -> JSONResponse:
    """An ``application/problem+json`` answer; ``Retry-After`` when a delay is known."""
    problem = Problem(
        type=f"urn:quire:problem:{reason.lower()}",
        title=_TITLES.get(status, "Error"),
        status=status,
        detail=detail,
        reason=reason,
        violations=list(violations),
        retry_after_seconds=retry_after_seconds,
    )
    headers = {}
    if retry_after_seconds is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_seconds)))
    return JSONResponse(
        problem.model_dump(mode="json"),
        status_code=status,
        headers=headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )


def from_rpc_error(error: grpc.RpcError) -> JSONResponse:
    """The problem for a status admission answered with."""
    details = details_of(error)
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    reason = details.reason or code.name
    status = http_status(code, reason)
    message = error.details() if hasattr(error, "details") else ""
    detail = message if status < 500 or status in (503, 504) else "internal error"
    violations = [Violation(field=f, description=d, reason=r) for f, d, r in details.violations]
    return problem_response(
        status, reason, detail or reason, violations, details.retry_after_seconds
    )


def from_quire_error(error: QuireError) -> JSONResponse:
    """The problem for a refusal the gateway makes itself, through the same
    status table as admission's (``quire.grpcstatus.status_for``)."""
    rpc = status_for(error, DOMAIN)
    code = next(c for c in grpc.StatusCode if c.value[0] == rpc.code)
    violations = [
        Violation(field=v.field, description=v.description, reason=v.reason)
        for v in getattr(error, "violations", ())
    ]
    retry = getattr(error, "retry_after", None)
    return problem_response(
        http_status(code, error.reason.value), error.reason.value, error.message, violations, retry
    )


def _from_validation(error: RequestValidationError) -> JSONResponse:
    """FastAPI's refusal of a request body or parameter, as a problem: the
    field paths and pydantic's type of each error, never the input itself."""
    violations = [
        Violation(
            field=".".join(str(part) for part in item.get("loc", ())),
            description=str(item.get("msg", "invalid")),
            reason=str(item.get("type", "")).upper(),
        )
        for item in error.errors()
    ]
    return problem_response(
        422, ReasonCode.INVALID_REQUEST.value, "the request is not valid", violations
    )


def install_problem_handlers(app: Any) -> None:
    """Every error leaves the app as a problem document."""

    async def rpc_error(_request: Request, error: Exception) -> JSONResponse:
        return from_rpc_error(error)  # type: ignore[arg-type]

    async def quire_error(_request: Request, error: Exception) -> JSONResponse:
        return from_quire_error(error)  # type: ignore[arg-type]

    async def validation_error(_request: Request, error: Exception) -> JSONResponse:
        return _from_validation(error)  # type: ignore[arg-type]

    async def http_error(_request: Request, error: Exception) -> JSONResponse:
        # Starlette's own refusals: an unparsable body, an unknown path or method.
        status = getattr(error, "status_code", 400)
        reason = ReasonCode.NOT_FOUND if status == 404 else ReasonCode.INVALID_REQUEST
        return problem_response(
            status, reason.value, _TITLES.get(status, "the request is not valid")
        )

    async def unexpected(_request: Request, _error: Exception) -> JSONResponse:
        return problem_response(500, ReasonCode.INTERNAL.value, "internal error")

    app.add_exception_handler(grpc.RpcError, rpc_error)
    app.add_exception_handler(QuireError, quire_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the problem statuses a route can answer."""
    return {
        status: {
            "description": _TITLES.get(status, "Error"),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in sorted({*ERROR_STATUSES, *statuses})
    }
