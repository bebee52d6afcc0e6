"""Turning what went wrong into one line on stderr and the right exit code.

A user's mistake (a missing file, a bad argument, a stack that is not
running, a timeout) is not a bug: it gets a sentence, not a traceback.
This is the one place that decides which exceptions are such mistakes and
what each one says; commands raise, they do not print errors themselves.
Anything not listed here is a bug and keeps its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import code_pb2
from nats.errors import NoServersError

from quire.cli.exitcodes import ExitCode
from quire.client import ArtifactDigestMismatch
from quire.errors import InvalidInput, InvalidSetting, QuireError
from quire.grpcstatus import ReceivedDetails, details_of, status_for
from quire.kek import KekConfigError
from quire.stack.datadirlock import DataDirInUse
from quire.stack.info import StackFileError
from quire.stack.refusals import ConfigurationRefused

__all__ = ["CliError", "Failure", "failure_of"]


class CliError(Exception):
    """A problem the CLI explains in one line and exits on with ``code``."""

    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Failure:
    """What the user is told: one line, an exit code, and (for ``--json``)
    the gRPC status name and Quire reason code when a call failed."""

    code: ExitCode
    message: str
    status: str = ""
    reason: str = ""
    details: ReceivedDetails = ReceivedDetails()
    """What the status's ``google.rpc`` details said (violations, quota, retry delay)."""

    def lines(self) -> list[str]:
        """The message, then one indented line per violation, quota and retry hint."""
        lines = [self.message]
        for field, description, reason in self.details.violations:
            lines.append(f"  {field}: {description}" + (f" ({reason})" if reason else ""))
        for subject, description in self.details.quota:
            lines.append(f"  {subject}: {description}")
        if self.details.retry_after_seconds is not None:
            lines.append(f"  retry after {self.details.retry_after_seconds:g}s")
        return lines

    def document(self) -> dict[str, object]:
        """``{"error": {...}}``: what ``--json`` prints on stdout instead of a result."""
        error: dict[str, object] = {"exit_code": int(self.code), "kind": self.code.name}
        error["message"] = self.message
        if self.status:
            error["status"] = self.status
        if self.reason:
            error["reason"] = self.reason
        if self.details.violations:
            error["field_violations"] = [
                {"field": field, "description": description, "reason": reason}
                for field, description, reason in self.details.violations
            ]
        if self.details.quota:
            error["quota_violations"] = [
                {"subject": subject, "description": description}
                for subject, description in self.details.quota
            ]
        if self.details.retry_after_seconds is not None:
            error["retry_after_seconds"] = self.details.retry_after_seconds
        return {"error": error}


def _rpc_failure(error: grpc.aio.AioRpcError) -> Failure:
    status = error.code()
    details = details_of(error)
    reason = details.reason
    said = error.details() or ""
    message = " ".join(part for part in (status.name, reason, said) if part)
    if reason:
        code = ExitCode.REFUSED  # the stack answered, and said no
    elif status is grpc.StatusCode.UNAVAILABLE:
        code = ExitCode.UNREACHABLE
        message = f"cannot reach the stack: {said or status.name}"
    elif status is grpc.StatusCode.DEADLINE_EXCEEDED:
        code = ExitCode.TIMEOUT
    else:
        code = ExitCode.FAILED
    return Failure(code, message, status=status.name, reason=reason, details=details)


def _quire_failure(error: QuireError) -> Failure:
    """A refusal raised on this side (a job the ledger does not know, a
    setting that cannot be used), said as the stack would say it."""
    if isinstance(error, InvalidSetting | InvalidInput):  # what the user typed or set
        return Failure(ExitCode.USAGE, error.message, reason=error.reason.value)
    status = code_pb2.Code.Name(status_for(error, "quire.cli").code)
    message = f"{status} {error.reason.value} {error.message}"
    return Failure(ExitCode.REFUSED, message, status=status, reason=error.reason.value)


def failure_of(error: BaseException) -> Failure | None:
    """The failure ``error`` stands for, or None when it is a bug (re-raise it)."""
    if isinstance(error, CliError):
        return Failure(error.code, str(error))
    if isinstance(error, grpc.aio.AioRpcError):
        return _rpc_failure(error)
    if isinstance(error, QuireError):
        return _quire_failure(error)
    if isinstance(error, KekConfigError):
        return Failure(ExitCode.USAGE, str(error))
    if isinstance(error, NoServersError):
        return Failure(ExitCode.UNREACHABLE, "cannot reach NATS: no server answers")
    if isinstance(error, ArtifactDigestMismatch):
        return Failure(ExitCode.FAILED, "the downloaded file does not match its digest; not kept")
    if isinstance(error, StackFileError):
        return Failure(ExitCode.UNREACHABLE, str(error))
    if isinstance(error, DataDirInUse):
        return Failure(ExitCode.DATA_DIR_IN_USE, str(error))
    if isinstance(error, ConfigurationRefused):  # quire up: a service's own line says why
        return Failure(ExitCode.USAGE, str(error))
    if isinstance(error, TimeoutError):
        return Failure(ExitCode.TIMEOUT, f"timed out: {error}" if str(error) else "timed out")
    if isinstance(error, ConnectionError):
        return Failure(ExitCode.UNREACHABLE, f"cannot connect: {error}")
    if isinstance(error, OSError) and error.filename is not None:
        return Failure(ExitCode.USAGE, f"{error.strerror or error}: {error.filename}")
    if isinstance(error, KeyboardInterrupt):
        return Failure(ExitCode.INTERRUPTED, "interrupted")
    return None
