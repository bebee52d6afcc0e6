"""Errors become gRPC statuses with google.rpc details, in one place."""

from __future__ import annotations

import errno
import pickle
import socket
from pathlib import Path

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2

from quire.errors import (
    Conflict,
    FieldViolation,
    InvalidInput,
    NotFound,
    Overloaded,
    Rejected,
    TransientError,
)
from quire.grpcstatus import abort_with, status_for
from quire.reasons import ReasonCode


def _details(status, kind):  # type: ignore[no-untyped-def]
    found = []
    for detail in status.details:
        if detail.Is(kind.DESCRIPTOR):
            message = kind()
            detail.Unpack(message)
            found.append(message)
    return found


def test_invalid_manifest_lists_every_violation_as_bad_request() -> None:
    error = InvalidInput(
        ReasonCode.INVALID_MANIFEST,
        "bad",
        (FieldViolation("a", "first"), FieldViolation("b", "second")),
    )
    status = status_for(error, "admission.quire")
    assert status.code == code_pb2.INVALID_ARGUMENT
    (info,) = _details(status, error_details_pb2.ErrorInfo)
    assert (info.reason, info.domain) == ("INVALID_MANIFEST", "admission.quire")
    (bad,) = _details(status, error_details_pb2.BadRequest)
    assert [v.field for v in bad.field_violations] == ["a", "b"]


def test_overload_carries_retry_info() -> None:
    status = status_for(Overloaded(ReasonCode.QUEUE_UNAVAILABLE, "busy", retry_after=2.5), "x")
    assert status.code == code_pb2.RESOURCE_EXHAUSTED
    (retry,) = _details(status, error_details_pb2.RetryInfo)
    assert retry.retry_delay.ToMilliseconds() == 2500


def test_codes_follow_the_error_kind() -> None:
    assert status_for(NotFound(), "x").code == code_pb2.NOT_FOUND
    assert (
        status_for(Conflict(ReasonCode.IDEMPOTENCY_KEY_REUSED), "x").code == code_pb2.ALREADY_EXISTS
    )
    assert (
        status_for(TransientError(ReasonCode.STORAGE_UNAVAILABLE), "x").code == code_pb2.UNAVAILABLE
    )


def test_unexpected_exceptions_leak_no_text() -> None:
    status = status_for(ValueError("secret clause text"), "x")
    assert status.code == code_pb2.INTERNAL
    assert "secret" not in status.message
    (info,) = _details(status, error_details_pb2.ErrorInfo)
    assert info.reason == "INTERNAL"


def test_errors_survive_crossing_a_process_boundary() -> None:
    error = pickle.loads(pickle.dumps(Rejected(ReasonCode.ENCRYPTED_PDF, "encrypted")))
    assert isinstance(error, Rejected)
    assert error.reason is ReasonCode.ENCRYPTED_PDF
    assert error.permanent


class _Aborted(Exception):
    pass


class _Context:
    """The one call ``abort_with`` makes on a servicer context."""

    def __init__(self) -> None:
        self.status: object = None

    async def abort_with_status(self, status: object) -> None:
        self.status = status
        raise _Aborted()


async def _aborted(error: BaseException) -> tuple[grpc.StatusCode, status_pb2.Status]:
    """The code and rich status ``abort_with`` sends for ``error`` at admission's edge."""
    context = _Context()
    with pytest.raises(_Aborted):
        await abort_with(context, error, "admission.quire")  # type: ignore[arg-type]
    metadata = dict(context.status.trailing_metadata)  # type: ignore[attr-defined]
    sent = status_pb2.Status.FromString(metadata["grpc-status-details-bin"])
    return context.status.code, sent  # type: ignore[attr-defined]


async def test_a_full_disk_met_anywhere_in_a_call_is_storage_unavailable(caplog) -> None:  # type: ignore[no-untyped-def]
    for error, code, reason in (
        (
            OSError(errno.ENOSPC, "No space left on device"),
            grpc.StatusCode.UNAVAILABLE,
            "STORAGE_UNAVAILABLE",
        ),
        (OSError(errno.EIO, "/secret/path"), grpc.StatusCode.INTERNAL, "INTERNAL"),
    ):
        sent_code, sent = await _aborted(error)
        assert sent_code == code
        (info,) = _details(sent, error_details_pb2.ErrorInfo)
        assert info.reason == reason
    # The unexpected one is logged by its type and errno name, never its text.
    assert "unexpected OSError (EIO)" in caplog.text
    assert "/secret/path" not in caplog.text


async def test_a_database_that_cannot_answer_is_database_unavailable(
    tmp_path: Path,
    caplog,  # type: ignore[no-untyped-def]
) -> None:
    """A real SQLite held locked past its busy timeout and a PostgreSQL port
    nobody listens on are passing faults; a statement that is simply wrong is
    an internal error."""
    import sqlite3

    from sqlalchemy import create_engine, text

    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x TEXT)")
    holder.execute("BEGIN IMMEDIATE")
    engine = create_engine(
        f"sqlite:///{path}", connect_args={"timeout": 0.05}, hide_parameters=True
    )
    try:
        with pytest.raises(Exception) as locked, engine.begin() as connection:
            connection.execute(text("INSERT INTO t VALUES (:x)"), {"x": "secret-value"})
        with pytest.raises(Exception) as wrong, engine.begin() as connection:
            connection.execute(text("SELECT nothing FROM nowhere"))
    finally:
        holder.close()
        engine.dispose()
    # A PostgreSQL that does not answer at all (nothing listens on the port).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    away = create_engine(f"postgresql+psycopg://quire@127.0.0.1:{port}/quire", hide_parameters=True)
    try:
        with pytest.raises(Exception) as unreachable, away.connect():
            pass
    finally:
        away.dispose()
    for error, code, reason in (
        (locked.value, grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE"),
        (unreachable.value, grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE"),
        (wrong.value, grpc.StatusCode.INTERNAL, "INTERNAL"),
        (ValueError("not the database"), grpc.StatusCode.INTERNAL, "INTERNAL"),
    ):
        sent_code, sent = await _aborted(error)
        assert sent_code == code
        (info,) = _details(sent, error_details_pb2.ErrorInfo)
        assert info.reason == reason
        assert "secret-value" not in sent.message
    assert "database unavailable (OperationalError, OperationalError)" in caplog.text
    assert "secret-value" not in caplog.text
