"""Reviewers (issue 41): a reviewer's token is a staff token that may make
review calls and nothing else. Admission issues it, names it
``reviewers/-/tokens/{id}`` and revokes it; WhoAmI answers it with its role;
every operator call refuses it PERMISSION_DENIED with ``REVIEWER_NOT_ALLOWED``
(the services' shared check and access guard, and admission's own servicer),
while the review calls' rule (``STAFF``) admits it. A tenant's token is no
staff token at all: UNAUTHENTICATED.

Unit tests on admission's tables (SQLite) and on the check with a stand-in
for admission's WhoAmI; tests/test_reviewer_role_stack.py holds the same
promises on a running stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2

from quire.access import OPERATOR, STAFF, AccessInterceptor
from quire.admission import tables
from quire.admission.tenants.directory import TenantDirectory
from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.callers import CallerVerifier
from quire.database import Database
from quire.errors import NotFound, PermissionDenied, Unauthenticated
from quire.grpcstatus import status_for
from quire.identity import TrustStore
from quire.operatorcheck import OperatorCheck

REVIEW_CALL = "/quire.validator.v1.ValidatorService/ListReviews"
OPERATOR_CALL = "/quire.audit.v1.AuditService/ListDeadLetters"


class Bearer:
    """The part of a servicer context the token checks read."""

    def __init__(self, token: str) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[TenantDirectory]:
    """Admission's tenants and tokens on a fresh SQLite database."""
    database = Database(f"sqlite:///{tmp_path / 'admission.db'}", tables.metadata)
    database.create_schema()
    yield TenantDirectory(database, cache_seconds=0)
    database.close()


async def test_a_reviewer_token_is_staff_but_no_operator(directory: TenantDirectory) -> None:
    record, secret = directory.transaction(directory.create_reviewer_token_in)
    assert record.role == "reviewer" and record.tenant is None
    assert await directory.authenticate_staff(Bearer(secret)) == (record.token_id, "reviewer")  # type: ignore[arg-type]
    with pytest.raises(PermissionDenied) as refused:
        await directory.authenticate_operator(Bearer(secret))  # type: ignore[arg-type]
    assert refused.value.reason == "REVIEWER_NOT_ALLOWED"
    with pytest.raises(Unauthenticated):
        await directory.authenticate(Bearer(secret))  # type: ignore[arg-type]


async def test_a_revoked_reviewer_token_is_no_longer_staff(directory: TenantDirectory) -> None:
    record, secret = directory.transaction(directory.create_reviewer_token_in)
    revoked = directory.transaction(
        lambda s: directory.revoke_token_in(s, None, record.token_id, "reviewer")
    )
    assert revoked.revoked_at is not None and revoked.role == "reviewer"
    with pytest.raises(Unauthenticated):
        await directory.authenticate_staff(Bearer(secret))  # type: ignore[arg-type]


async def test_a_tenants_token_is_not_staff_and_revokes_only_as_a_tenants(
    directory: TenantDirectory,
) -> None:
    tenant, secret = directory.create_tenant("acme")
    with pytest.raises(Unauthenticated):
        await directory.authenticate_staff(Bearer(secret))  # type: ignore[arg-type]
    token_id = secret.split("_")[1]
    with pytest.raises(NotFound):  # not a reviewer's
        directory.transaction(lambda s: directory.revoke_token_in(s, None, token_id, "reviewer"))
    assert directory.revoke_token(tenant.id, token_id).revoked_at is not None


class Admission:
    """admission's WhoAmI as the check calls it: one staff token and its answer."""

    def __init__(self, token: str, reply: admin_pb.Operator) -> None:
        self._token = token
        self._reply = reply

    async def WhoAmI(self, request: Any, *, metadata: Any, **_: Any) -> admin_pb.Operator:  # noqa: N802
        if dict(metadata).get("authorization") != f"Bearer {self._token}":
            raise _Unauthenticated()
        return self._reply


class _Unauthenticated(grpc.aio.AioRpcError):
    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.UNAUTHENTICATED, None, None)


REVIEWER = admin_pb.Operator(token="reviewers/-/tokens/abc123abc123", role="reviewer")
OPERATOR_REPLY = admin_pb.Operator(token="operators/-/tokens/def456def456", role="operator")


async def test_the_check_refuses_a_reviewer_every_operator_call_and_admits_it_to_reviews() -> None:
    check = OperatorCheck(Admission("r", REVIEWER))  # type: ignore[arg-type]
    staff = await check.staff_of(Bearer("r"))  # type: ignore[arg-type]
    assert (staff.token, staff.role, staff.token_id) == (REVIEWER.token, "reviewer", "abc123abc123")
    with pytest.raises(PermissionDenied) as refused:
        await check.operator_of(Bearer("r"))  # type: ignore[arg-type]
    status = status_for(refused.value, "audit.quire")
    assert status.code == code_pb2.PERMISSION_DENIED
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("REVIEWER_NOT_ALLOWED", "audit.quire")
    with pytest.raises(Unauthenticated):
        await check.staff_of(Bearer("someone else"))  # type: ignore[arg-type]


async def test_an_operator_passes_both_checks_and_an_older_admission_means_operators() -> None:
    check = OperatorCheck(Admission("o", OPERATOR_REPLY))  # type: ignore[arg-type]
    assert await check.operator_of(Bearer("o")) == "def456def456"  # type: ignore[arg-type]
    assert (await check.staff_of(Bearer("o"))).is_operator  # type: ignore[arg-type]
    roleless = admin_pb.Operator(token=OPERATOR_REPLY.token)  # from before reviewers
    check = OperatorCheck(Admission("o", roleless))  # type: ignore[arg-type]
    assert await check.operator_of(Bearer("o")) == "def456def456"  # type: ignore[arg-type]


async def test_the_access_guard_admits_a_reviewer_where_the_rule_says_staff_only() -> None:
    guard = AccessInterceptor(
        {REVIEW_CALL: STAFF, OPERATOR_CALL: OPERATOR},
        verifier=CallerVerifier(TrustStore({})),
        operators=OperatorCheck(Admission("r", REVIEWER)),  # type: ignore[arg-type]
        domain="validator.quire",
    )
    bearer = (("authorization", "Bearer r"),)
    assert await guard.admit(REVIEW_CALL, bearer) == "reviewer"
    with pytest.raises(PermissionDenied) as refused:
        await guard.admit(OPERATOR_CALL, bearer)
    assert refused.value.reason == "REVIEWER_NOT_ALLOWED"
