"""The one place where Quire errors become gRPC statuses with google.rpc details.

Every status carries an ``ErrorInfo`` (reason = reason code, domain = the
service). Manifests add ``BadRequest`` field violations; load shedding adds
``RetryInfo``. Unexpected exceptions become INTERNAL with no exception text.
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry import trace

from quire.databasefaults import as_database_error
from quire.errors import (
    Conflict,
    DataLoss,
    FailedPrecondition,
    InvalidInput,
    NotFound,
    Overloaded,
    PermanentError,
    PermissionDenied,
    QuireError,
    Unauthenticated,
)
from quire.fullstorage import as_storage_error
from quire.reasons import ReasonCode
from quire.telemetry import record_failure

__all__ = [
    "status_for",
    "abort_with",
    "reason_of",
    "details_of",
    "ReceivedDetails",
    "at_the_edge",
]

log = logging.getLogger(__name__)

_CODES: tuple[tuple[type[QuireError], int], ...] = (
    (InvalidInput, code_pb2.INVALID_ARGUMENT),
    (NotFound, code_pb2.NOT_FOUND),
    (Unauthenticated, code_pb2.UNAUTHENTICATED),
    (PermissionDenied, code_pb2.PERMISSION_DENIED),
    (Conflict, code_pb2.ALREADY_EXISTS),
    (FailedPrecondition, code_pb2.FAILED_PRECONDITION),
    (DataLoss, code_pb2.DATA_LOSS),
    (Overloaded, code_pb2.RESOURCE_EXHAUSTED),
    (PermanentError, code_pb2.INVALID_ARGUMENT),
)


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def status_for(error: BaseException, domain: str) -> status_pb2.Status:
    """Build the rich status for ``error``; never includes exception text of unknown errors."""
    if not isinstance(error, QuireError):
        info = error_details_pb2.ErrorInfo(reason=ReasonCode.INTERNAL.value, domain=domain)
        return status_pb2.Status(
            code=code_pb2.INTERNAL, message="internal error", details=[_pack(info)]
        )
    code = next((c for kind, c in _CODES if isinstance(error, kind)), code_pb2.UNAVAILABLE)
    details = [_pack(error_details_pb2.ErrorInfo(reason=error.reason.value, domain=domain))]
    if isinstance(error, InvalidInput) and error.violations:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description, reason=v.reason
                )
                for v in error.violations
            ]
        )
        details.append(_pack(bad))
    if isinstance(error, Overloaded) and error.quota:
        failure = error_details_pb2.QuotaFailure(
            violations=[
                error_details_pb2.QuotaFailure.Violation(
                    subject=v.subject, description=v.description
                )
                for v in error.quota
            ]
        )
        details.append(_pack(failure))
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(retry_after * 1000))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    return status_pb2.Status(code=code, message=error.message, details=details)


async def abort_with(
    context: grpc.aio.ServicerContext, error: BaseException, domain: str
) -> NoReturn:
    """Abort the RPC with the status for ``error``; a full disk met anywhere
    is ``STORAGE_UNAVAILABLE`` (``quire.fullstorage``) and a database that
    cannot answer ``DATABASE_UNAVAILABLE`` (``quire.databasefaults``), both
    retryable."""
    if isinstance(error, Exception):
        error = as_database_error(as_storage_error(error))
    if not isinstance(error, QuireError):
        # The type (and an OSError's errno name) only: exception text may
        # carry document content or paths.
        code = errno.errorcode.get(error.errno or 0, "") if isinstance(error, OSError) else ""
        log.error(
            "unexpected %s%s in %s", type(error).__name__, f" ({code})" if code else "", domain
        )
    reason = error.reason.value if isinstance(error, QuireError) else ReasonCode.INTERNAL.value
    record_failure(trace.get_current_span(), error, reason)
    await context.abort_with_status(rpc_status.to_status(status_for(error, domain)))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


def reason_of(error: grpc.RpcError) -> str | None:
    """The ErrorInfo reason of a received status, for clients and tests."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info.reason
    return None


@dataclass(frozen=True)
class ReceivedDetails:
    """What a received status says in ``google.rpc`` details, for people."""

    reason: str = ""
    violations: tuple[tuple[str, str, str], ...] = ()
    """``BadRequest``: (field path, description, reason) of each violation."""
    quota: tuple[tuple[str, str], ...] = ()
    """``QuotaFailure``: (subject, description)."""
    retry_after_seconds: float | None = None
    """``RetryInfo``: how long to wait before trying again."""


def details_of(error: grpc.RpcError) -> ReceivedDetails:
    """Every detail of a received status that a person acts on."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        return ReceivedDetails()
    reason, violations, quota, retry = "", [], [], None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations += [(v.field, v.description, v.reason) for v in bad.field_violations]
        elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            failure = error_details_pb2.QuotaFailure()
            detail.Unpack(failure)
            quota += [(v.subject, v.description) for v in failure.violations]
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            hint = error_details_pb2.RetryInfo()
            detail.Unpack(hint)
            retry = hint.retry_delay.ToMilliseconds() / 1000
    return ReceivedDetails(reason, tuple(violations), tuple(quota), retry)


def at_the_edge(domain: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a servicer method so any error leaves as a rich gRPC status."""

    def decorate(method: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(method):

            @functools.wraps(method)
            async def streaming(self: object, request: Any, context: Any) -> Any:
                try:
                    async for item in method(self, request, context):
                        yield item
                except Exception as error:  # noqa: BLE001 - translated here, once
                    await abort_with(context, error, domain)

            return streaming

        @functools.wraps(method)
        async def unary(self: object, request: Any, context: Any) -> Any:
            try:
                return await method(self, request, context)
            except Exception as error:  # noqa: BLE001 - translated here, once
                await abort_with(context, error, domain)

        return unary

    return decorate
