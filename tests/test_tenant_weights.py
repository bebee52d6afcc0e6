"""Tenants' scheduling weights (issue 18): what the batch dispatcher's fair
share reads. Set on CreateTenant and UpdateTenantLimits (0: the default, 1;
1 to 100 else INVALID_ARGUMENT on ``limits.scheduling_weight``), stored in
``tenants.scheduling_weight`` and shown in the tenant's limits; the CLI's
``quire tenants create/limits --weight``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import grpc
import pytest

from quire.client import TenantAdminClient
from quire.grpcstatus import details_of, reason_of
from quire.stack.supervisor import StackInfo
from quire.testing.quirecli import run_quire

pytestmark = pytest.mark.stack


@pytest.fixture
async def admin(stack) -> AsyncIterator[TenantAdminClient]:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as client:
        yield client


def _name() -> str:
    return f"weights-{uuid.uuid4().hex[:8]}"


async def test_a_weight_is_kept_and_shown_in_the_tenant_limits(admin: TenantAdminClient) -> None:
    created = await admin.create_tenant(_name(), scheduling_weight=3)
    assert created.tenant.limits.scheduling_weight == 3
    listed = {t.name: t for t in await admin.list_tenants()}
    assert listed[created.tenant.name].limits.scheduling_weight == 3
    changed = await admin.update_limits(created.tenant.name, scheduling_weight=100)
    assert changed.limits.scheduling_weight == 100
    reset = await admin.update_limits(created.tenant.name, scheduling_weight=0)
    assert reset.limits.scheduling_weight == 0, "0 is the default weight, 1"


@pytest.mark.parametrize("weight", [-1, 101])
async def test_a_weight_outside_1_to_100_is_refused_on_its_field(
    admin: TenantAdminClient, weight: int
) -> None:
    tenant = (await admin.create_tenant(_name())).tenant.name
    for call in (
        admin.update_limits(tenant, scheduling_weight=weight),
        admin.create_tenant(_name(), scheduling_weight=weight),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(refused.value) == "INVALID_TENANT"
        fields = [field for field, *_ in details_of(refused.value).violations]
        assert fields == ["limits.scheduling_weight"]


async def test_the_cli_sets_a_weight_and_keeps_the_other_limits(
    stack,  # type: ignore[no-untyped-def]
    admin: TenantAdminClient,
) -> None:
    created = run_quire(
        stack.data_dir, "tenants", "create", _name(), "--weight", "2", "--max-outstanding-jobs", "7"
    )
    assert created.returncode == 0, created.stderr
    tenant = created.stdout.split()[0]
    listed = {t.name: t for t in await admin.list_tenants()}
    assert listed[tenant].limits.scheduling_weight == 2
    weighted = run_quire(stack.data_dir, "tenants", "limits", tenant, "--weight", "5")
    assert weighted.returncode == 0, weighted.stderr
    assert "outstanding≤7" in weighted.stdout and "weight=5" in weighted.stdout
