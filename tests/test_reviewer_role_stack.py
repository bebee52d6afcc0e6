"""Reviewers and the operator console's reads on the session's stack (issue 41).

``quire tokens create reviewers`` prints a reviewer's token once; WhoAmI
names it with its role; every RPC of every service but the review calls
refuses it (an operator's call PERMISSION_DENIED with REVIEWER_NOT_ALLOWED,
a tenant's or a service's UNAUTHENTICATED: it is neither); once revoked it
opens nothing. Operators read every stage's queue and every tenant's batches
as the tenant reads its own; a tenant cannot."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from test_batches import packets
from test_caller_auth import METHODS, _raw_call

from quire.access import STAFF
from quire.accesspolicy import POLICIES
from quire.admission.v1 import batch_pb2
from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient
from quire.grpcstatus import reason_of
from quire.pipeline import QUEUED_STAGE_NAMES, STAGE_NAMES
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.tls import aio_channel

pytestmark = pytest.mark.stack

WHO_AM_I = "/quire.admission.v1.TenantAdminService/WhoAmI"
ADMISSION_TENANT_API = "/quire.admission.v1.AdmissionService/"
"""The tenants' own API: a reviewer's token is no tenant's."""


def _created(stack: Stack, tenant: str) -> tuple[str, str]:
    """``quire tokens create TENANT``: the token's name and its secret, shown once."""
    made = run_quire(stack.data_dir, "tokens", "create", tenant)
    assert made.returncode == 0, made.stderr
    name, secret_line = made.stdout.splitlines()[:2]
    assert secret_line.startswith("token (shown once): qt_")
    return name, secret_line.rsplit(" ", 1)[1]


async def _settled(client: AdmissionClient, name: str, timeout: float = 120.0) -> None:
    """Until the batch is done or cancelled (bounded)."""
    final = {batch_pb2.BATCH_STATE_DONE, batch_pb2.BATCH_STATE_CANCELLED}
    for _ in range(int(timeout / 0.2)):
        if (await client.get_batch(name)).state in final:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("the batch did not finish")


async def _answer(call: Any) -> tuple[grpc.StatusCode, str | None]:
    """The status a raw call ends with, and its reason."""
    try:
        if isinstance(call, grpc.aio.UnaryStreamCall | grpc.aio.StreamStreamCall):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as error:
        return error.code(), reason_of(error)
    return grpc.StatusCode.OK, None


def _expected(service: str, name: str) -> grpc.StatusCode:
    """What a reviewer's token gets from an RPC that is no review call."""
    rule = POLICIES[service][name]
    if name.startswith(ADMISSION_TENANT_API) or not (rule.operator or rule.bearer):
        return grpc.StatusCode.UNAUTHENTICATED
    return grpc.StatusCode.PERMISSION_DENIED


async def test_a_reviewers_token_opens_the_review_calls_and_nothing_else(stack: Stack) -> None:
    name, secret = await asyncio.to_thread(_created, stack, "reviewers")
    assert name.startswith("reviewers/-/tokens/")
    info = StackInfo.read(stack.data_dir)
    reviewer = bearer_metadata(secret)
    async with aio_channel(info.endpoints["admission"], None) as channel:
        who = await admin_grpc.TenantAdminServiceStub(channel).WhoAmI(
            admin_pb.WhoAmIRequest(), metadata=reviewer
        )
    assert (who.token, who.role) == (name, "reviewer")

    answered = 0
    for service, method, descriptor in METHODS:
        if POLICIES[service][method] == STAFF or method == WHO_AM_I:
            continue
        async with aio_channel(info.endpoints[service], None) as channel:
            code, reason = await _answer(_raw_call(channel, method, descriptor, metadata=reviewer))
        expected = _expected(service, method)
        assert code == expected, f"{method} on {service} answered {code.name}"
        if expected == grpc.StatusCode.PERMISSION_DENIED:
            assert reason == "REVIEWER_NOT_ALLOWED", f"{method} on {service}: {reason}"
        answered += 1
    assert answered > 60, "every service's every RPC but the review calls"

    # The review calls let the reviewer in.
    from quire.validator.v1 import validator_service_pb2 as vpb
    from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

    async with aio_channel(info.endpoints["validator"], None) as channel:
        await vgrpc.ValidatorServiceStub(channel).ListReviews(
            vpb.ListReviewsRequest(), metadata=reviewer
        )

    revoked = await asyncio.to_thread(run_quire, stack.data_dir, "tokens", "revoke", name)
    assert revoked.returncode == 0 and f"{name}  revoked" in revoked.stdout, revoked.stderr
    async with aio_channel(info.endpoints["admission"], None) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await admin_grpc.TenantAdminServiceStub(channel).WhoAmI(
                admin_pb.WhoAmIRequest(), metadata=reviewer
            )
    assert gone.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_reviewers_refusal_names_its_reason(stack: Stack) -> None:
    _name, secret = await asyncio.to_thread(_created, stack, "reviewers")
    info = StackInfo.read(stack.data_dir)
    async with aio_channel(info.endpoints["admission"], None) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin_grpc.TenantAdminServiceStub(channel).CreateToken(
                admin_pb.CreateTokenRequest(tenant="reviewers"), metadata=bearer_metadata(secret)
            )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason_of(refused.value) == "REVIEWER_NOT_ALLOWED"


async def test_operators_read_every_tenants_batches_as_the_tenant_does(
    stack: Stack, tenants: Any, tmp_path: Path
) -> None:
    first: AdmissionClient = await tenants("batches-a")
    second: AdmissionClient = await tenants("batches-b")
    path = write_text_pdf(tmp_path / "page.pdf", [uuid.uuid4().hex])
    sha256 = (await first.upload(path)).sha256
    assert sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    await second.upload(path)
    older = await first.submit_batch(packets(sha256, 3))
    newer = await second.submit_batch(packets(sha256, 2))

    info = StackInfo.read(stack.data_dir)
    operator = bearer_metadata(info.operator_token())
    async with aio_channel(info.endpoints["admission"], None) as channel:
        admin = admin_grpc.TenantAdminServiceStub(channel)
        listed = await admin.ListTenantBatches(
            admin_pb.ListTenantBatchesRequest(), metadata=operator
        )
        names = [(b.tenant, b.batch.name) for b in listed.batches]
        assert names.index((second.tenant, newer.name)) < names.index((first.tenant, older.name)), (  # type: ignore[attr-defined]
            "newest first"
        )
        only = await admin.ListTenantBatches(
            admin_pb.ListTenantBatchesRequest(tenant=first.tenant, page_size=1),  # type: ignore[attr-defined]
            metadata=operator,
        )
        assert [b.batch.name for b in only.batches] == [older.name] and not only.next_page_token
        everyone = await admin.ListTenantBatches(
            admin_pb.ListTenantBatchesRequest(page_size=1), metadata=operator
        )
        with pytest.raises(grpc.aio.AioRpcError) as other_filter:
            await admin.ListTenantBatches(
                admin_pb.ListTenantBatchesRequest(
                    tenant=first.tenant,  # type: ignore[attr-defined]
                    page_size=1,
                    page_token=everyone.next_page_token,
                ),
                metadata=operator,
            )
        assert (other_filter.value.code(), reason_of(other_filter.value)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_PAGE",
        )

        # Compared once the batch has stopped moving: while it runs, two reads
        # a moment apart may rightly differ.
        await _settled(first, older.name)
        shown = await admin.GetTenantBatch(
            admin_pb.GetTenantBatchRequest(tenant=first.tenant, name=older.name),  # type: ignore[attr-defined]
            metadata=operator,
        )
        assert shown == await first.get_batch(older.name)
        jobs = await admin.ListTenantBatchJobs(
            admin_pb.ListTenantBatchJobsRequest(tenant=first.tenant, parent=older.name),  # type: ignore[attr-defined]
            metadata=operator,
        )
        assert [j.index for j in jobs.jobs] == [0, 1, 2]
        assert [j.bundle_id for j in jobs.jobs] == [
            j.bundle_id for j in (await first.list_batch_jobs(older.name)).jobs
        ]
        for wrong in (second.tenant, "tenants/nobody"):  # type: ignore[attr-defined]
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await admin.GetTenantBatch(
                    admin_pb.GetTenantBatchRequest(tenant=wrong, name=older.name),
                    metadata=operator,
                )
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND

        queues = await admin.ListQueues(admin_pb.ListQueuesRequest(), metadata=operator)
    stages = [(q.stage, q.candidate) for q in queues.queues]
    expected = [
        (stage, candidate)
        for stage in STAGE_NAMES
        for candidate in ((False, True) if stage in QUEUED_STAGE_NAMES else (False,))
    ]
    assert stages == expected
    assert all(q.ready >= 0 for q in queues.queues)
    assert not any(q.HasField("oldest_age") for q in queues.queues if q.ready == 0)
