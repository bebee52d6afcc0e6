"""TenantAdminService: operators create tenants, set their limits and
retention periods, issue and revoke tokens, and register the source systems
a tenant's manifests may name by reference; ``quire retention apply`` has
admission forget the uploads it retired; the operator console reads the
queues and every tenant's batches. Every call needs the operator token but
WhoAmI, which names an operator's or a reviewer's token; a reviewer's token
is refused every other call (PERMISSION_DENIED, ``REVIEWER_NOT_ALLOWED``).
Reviewer tokens are made and revoked here, as ``reviewers/-/tokens/{id}``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

import grpc
from google.protobuf.message import Message
from sqlalchemy import Connection

from quire.admission import tables
from quire.admission.batches.everyone import TenantBatches
from quire.admission.jobs.queues import QueueReadings
from quire.admission.rollouts import records as rollouts
from quire.admission.rollouts.rulesets import RolloutRulesets
from quire.admission.rollouts.sync import RolloutSync
from quire.admission.rulesets.currents import current_messages
from quire.admission.tenants import sourcesystems
from quire.admission.tenants.directory import (
    REVIEWER_ROLE,
    TENANT_ROLE,
    Tenant,
    TenantDirectory,
    TokenRecord,
)
from quire.admission.tenants.storagepolicy import (
    PERIODS,
    TenantStorage,
    forget_source,
    read_storage,
)
from quire.admission.v1 import batch_pb2, rollout_pb2
from quire.admission.v1 import tenant_admin_service_pb2 as pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as pb_grpc
from quire.declarations import SHA256_HEX
from quire.egress import EgressPolicy
from quire.errors import FieldViolation, InvalidInput, NotFound
from quire.grpcstatus import at_the_edge
from quire.idempotency import OPERATORS, RequestOnce
from quire.jobs import timestamp
from quire.paging import PageTokens, Position
from quire.reasons import ReasonCode

__all__ = ["TenantAdminServicer"]

DOMAIN = "admission.quire"
M = TypeVar("M", bound=Message)
SecretReply = TypeVar("SecretReply", pb.CreateTenantResponse, pb.CreateTokenResponse)
LIST_TENANTS = "quire.admission.v1.TenantAdminService/ListTenants"
REVIEWERS = "reviewers"
"""CreateToken's ``tenant`` for a reviewer's token."""
REVIEWER_TOKEN = "reviewers/-/tokens/"
log = logging.getLogger(__name__)


def _without_secret(reply: SecretReply) -> SecretReply:
    """What a replay returns: the same tenant or token, its secret not kept
    (only the token's hash is ever stored)."""
    kept = type(reply)()
    kept.CopyFrom(reply)
    kept.secret = ""
    kept.secret_withheld = True
    return kept


def _tenant_id(name: str) -> str:
    prefix, _, ident = name.partition("/")
    if prefix != "tenants" or not ident or "/" in ident:
        raise NotFound("tenant not found")
    return ident


def _token(record: TokenRecord) -> pb.Token:
    name = f"tenants/{record.tenant}/tokens/{record.token_id}"
    if record.role == REVIEWER_ROLE:
        name = f"{REVIEWER_TOKEN}{record.token_id}"
    token = pb.Token(
        name=name,
        create_time=timestamp(record.created_at),
    )
    if record.revoked_at is not None:
        token.revoke_time.CopyFrom(timestamp(record.revoked_at))
    return token


def _storage(limits: pb.TenantLimits, retention: pb.TenantRetention) -> TenantStorage:
    """The request's quota and periods; negative values are refused."""
    periods = {name: getattr(retention, name) for name in PERIODS}
    values = {"storage_quota_bytes": limits.storage_quota_bytes, **periods}
    for name, value in values.items():
        if value < 0:
            raise InvalidInput(
                ReasonCode.INVALID_TENANT,
                f"{name} must not be negative",
                (FieldViolation(name, "negative"),),
            )
    return TenantStorage(**{name: value or None for name, value in values.items()})


MAX_SCHEDULING_WEIGHT = 100


def _weight(limits: pb.TenantLimits) -> int:
    """The request's scheduling weight: 0 (the default, 1) or 1 to 100."""
    weight = limits.scheduling_weight
    if not 0 <= weight <= MAX_SCHEDULING_WEIGHT:
        raise InvalidInput(
            ReasonCode.INVALID_TENANT,
            f"scheduling_weight must be 1 to {MAX_SCHEDULING_WEIGHT} (0: the default, 1)",
            (FieldViolation("limits.scheduling_weight", "out of range"),),
        )
    return weight


def _tenant(
    tenant: Tenant, tokens: list[TokenRecord], storage: TenantStorage | None = None
) -> pb.Tenant:
    storage = storage or TenantStorage()
    message = pb.Tenant(
        name=f"tenants/{tenant.id}",
        display_name=tenant.name,
        limits=pb.TenantLimits(
            max_upload_bytes=tenant.max_upload_bytes or 0,
            max_outstanding_jobs=tenant.max_outstanding_jobs or 0,
            storage_quota_bytes=storage.storage_quota_bytes or 0,
            scheduling_weight=tenant.scheduling_weight or 0,
        ),
        tokens=[_token(t) for t in tokens],
        retention=pb.TenantRetention(**{name: getattr(storage, name) or 0 for name in PERIODS}),
    )
    if tenant.created_at is not None:
        message.create_time.CopyFrom(timestamp(tenant.created_at))
    return message


def _position(listed: tuple[Tenant, list[TokenRecord]]) -> Position:
    """A listed tenant's place in ListTenants' order (``TenantDirectory.list_tenants``)."""
    tenant, _tokens = listed
    assert tenant.created_at is not None  # every stored tenant has one
    return tenant.created_at, tenant.id


class TenantAdminServicer(pb_grpc.TenantAdminServiceServicer):
    """Admission's TenantAdminService. Every call needs a live operator token;
    a call that changes something is answered once per request id (remembered
    under the operators' name)."""

    def __init__(
        self,
        tenants: TenantDirectory,
        *,
        pages: PageTokens,
        open_rollouts: rollouts.OpenRollouts | None = None,
        rollout_sync: RolloutSync | None = None,
        rollout_rulesets: RolloutRulesets | None = None,
        egress: EgressPolicy | None = None,
        batches: TenantBatches | None = None,
        queues: QueueReadings | None = None,
    ) -> None:
        self._tenants = tenants
        self._batches = batches
        """Every tenant's batches, for the console."""
        self._queues = queues
        """The stages' queues, for the console."""
        self._egress = egress or EgressPolicy()
        """Where a source system's base URL may point."""
        self._pages = pages
        self._open_rollouts = open_rollouts
        """Intake's cache of the open rollouts, told when one opens or closes."""
        self._rollout_sync = rollout_sync
        """Puts a changed rollout on the queues (caps, the workers' entries)."""
        self._rollout_rulesets = rollout_rulesets
        """Candidate rulesets: loaded before use, current once promoted."""

    @at_the_edge(DOMAIN)
    async def CreateTenant(  # noqa: N802 - gRPC method name
        self, request: pb.CreateTenantRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTenantResponse:
        await self._tenants.authenticate_operator(context)
        storage = _storage(request.limits, request.retention)
        weight = _weight(request.limits)
        once = self._once(request, pb.CreateTenantResponse, keep=_without_secret)

        def create(connection: Connection) -> pb.CreateTenantResponse:
            tenant, secret = self._tenants.create_tenant_in(
                connection,
                request.display_name,
                max_upload_bytes=request.limits.max_upload_bytes,
                max_outstanding_jobs=request.limits.max_outstanding_jobs,
                storage=storage,
                scheduling_weight=weight,
            )
            assert tenant.created_at is not None
            record = TokenRecord(secret.split("_")[1], tenant.id, tenant.created_at, None)
            return pb.CreateTenantResponse(tenant=_tenant(tenant, [record], storage), secret=secret)

        return await self._run(once, create)

    @at_the_edge(DOMAIN)
    async def ListTenants(  # noqa: N802 - gRPC method name
        self, request: pb.ListTenantsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTenantsResponse:
        await self._tenants.authenticate_operator(context)
        page = self._pages.page(LIST_TENANTS, request.page_size, request.page_token)
        listed = await asyncio.to_thread(
            self._tenants.list_tenants, after=page.after, limit=page.fetch
        )
        served, token = page.cut(listed, _position)
        storage = await asyncio.to_thread(self._tenants.storage, [t.id for t, _ in served])
        return pb.ListTenantsResponse(
            tenants=[_tenant(t, tokens, storage[t.id]) for t, tokens in served],
            next_page_token=token,
        )

    @at_the_edge(DOMAIN)
    async def UpdateTenantLimits(  # noqa: N802 - gRPC method name
        self, request: pb.UpdateTenantLimitsRequest, context: grpc.aio.ServicerContext
    ) -> pb.Tenant:
        await self._tenants.authenticate_operator(context)
        storage = _storage(request.limits, pb.TenantRetention())
        weight = _weight(request.limits)
        tenant_id = _tenant_id(request.name)

        def update(connection: Connection) -> pb.Tenant:
            tenant = self._tenants.update_limits_in(
                connection,
                tenant_id,
                max_upload_bytes=request.limits.max_upload_bytes,
                max_outstanding_jobs=request.limits.max_outstanding_jobs,
                storage_quota_bytes=storage.storage_quota_bytes or 0,
                scheduling_weight=weight,
            )
            return _tenant(tenant, [], read_storage(connection, [tenant_id])[tenant_id])

        reply = await self._run(self._once(request, pb.Tenant), update)
        self._tenants.forget_verified()
        return reply

    @at_the_edge(DOMAIN)
    async def UpdateTenantRetention(  # noqa: N802 - gRPC method name
        self, request: pb.UpdateTenantRetentionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Tenant:
        await self._tenants.authenticate_operator(context)
        tenant_id = _tenant_id(request.name)
        periods = _storage(pb.TenantLimits(), request.retention)

        def update(connection: Connection) -> pb.Tenant:
            tenant, storage = self._tenants.update_retention_in(
                connection, tenant_id, **{name: getattr(periods, name) or 0 for name in PERIODS}
            )
            return _tenant(tenant, [], storage)

        return await self._run(self._once(request, pb.Tenant), update)

    @at_the_edge(DOMAIN)
    async def ForgetSource(  # noqa: N802 - gRPC method name
        self, request: pb.ForgetSourceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForgetSourceResponse:
        await self._tenants.authenticate_operator(context)
        if not SHA256_HEX.match(request.sha256):
            raise InvalidInput(
                ReasonCode.DIGEST_MISMATCH,
                "sha256 must be 64 lower-case hex digits",
                (FieldViolation("sha256", "not a sha256 digest"),),
            )
        tenant_id = _tenant_id(request.tenant)
        return await self._run(
            self._once(request, pb.ForgetSourceResponse),
            lambda s: pb.ForgetSourceResponse(
                forgotten=forget_source(s, tenant_id, request.sha256)
            ),
        )

    @at_the_edge(DOMAIN)
    async def CreateToken(  # noqa: N802 - gRPC method name
        self, request: pb.CreateTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTokenResponse:
        await self._tenants.authenticate_operator(context)
        tenant_id = None if request.tenant == REVIEWERS else _tenant_id(request.tenant)

        def create(connection: Connection) -> pb.CreateTokenResponse:
            if tenant_id is None:
                record, secret = self._tenants.create_reviewer_token_in(connection)
            else:
                record, secret = self._tenants.create_token_in(connection, tenant_id)
            return pb.CreateTokenResponse(token=_token(record), secret=secret)

        return await self._run(
            self._once(request, pb.CreateTokenResponse, keep=_without_secret), create
        )

    @at_the_edge(DOMAIN)
    async def WhoAmI(  # noqa: N802 - gRPC method name
        self, request: pb.WhoAmIRequest, context: grpc.aio.ServicerContext
    ) -> pb.Operator:
        token_id, role = await self._tenants.authenticate_staff(context)
        prefix = REVIEWER_TOKEN if role == REVIEWER_ROLE else "operators/-/tokens/"
        return pb.Operator(token=f"{prefix}{token_id}", role=role)

    @at_the_edge(DOMAIN)
    async def RevokeToken(  # noqa: N802 - gRPC method name
        self, request: pb.RevokeTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.Token:
        await self._tenants.authenticate_operator(context)
        parts = request.name.split("/")
        if len(parts) != 4 or parts[0] not in ("tenants", REVIEWERS) or parts[2] != "tokens":
            raise NotFound("token not found")
        if parts[0] == REVIEWERS and parts[1] != "-":
            raise NotFound("token not found")
        tenant_id, role = (
            (None, REVIEWER_ROLE) if parts[0] == REVIEWERS else (parts[1], TENANT_ROLE)
        )
        reply = await self._run(
            self._once(request, pb.Token),
            lambda s: _token(self._tenants.revoke_token_in(s, tenant_id, parts[3], role)),
        )
        self._tenants.forget_verified()
        return reply

    @at_the_edge(DOMAIN)
    async def PutSourceSystem(  # noqa: N802 - gRPC method name
        self, request: pb.PutSourceSystemRequest, context: grpc.aio.ServicerContext
    ) -> pb.SourceSystem:
        """Create or replace; jobs already accepted keep the registration they copied."""
        await self._tenants.authenticate_operator(context)
        wanted = sourcesystems.checked_system(request.source_system)
        await sourcesystems.check_destination(wanted, self._egress)
        stored = await asyncio.to_thread(
            self._tenants.transaction, lambda s: sourcesystems.put_system(s, wanted)
        )
        # Ids only: never the base URL's path nor the credential reference.
        log.info(
            "source system registered",
            extra={"tenant": stored.tenant, "source_system": stored.system},
        )
        return sourcesystems.system_message(stored)

    @at_the_edge(DOMAIN)
    async def ListSourceSystems(  # noqa: N802 - gRPC method name
        self, request: pb.ListSourceSystemsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSourceSystemsResponse:
        await self._tenants.authenticate_operator(context)
        tenant_id = _tenant_id(request.parent)
        listed = await asyncio.to_thread(
            self._tenants.transaction, lambda s: sourcesystems.list_systems(s, tenant_id)
        )
        return pb.ListSourceSystemsResponse(
            source_systems=[sourcesystems.system_message(system) for system in listed]
        )

    @at_the_edge(DOMAIN)
    async def DeleteSourceSystem(  # noqa: N802 - gRPC method name
        self, request: pb.DeleteSourceSystemRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSourceSystemResponse:
        """Forget the registration; jobs already accepted keep their copy."""
        await self._tenants.authenticate_operator(context)
        tenant_id, system = sourcesystems.parse_name(request.name)
        deleted = await asyncio.to_thread(
            self._tenants.transaction,
            lambda s: sourcesystems.delete_system(s, tenant_id, system),
        )
        if deleted:
            log.info("source system deleted", extra={"tenant": tenant_id, "source_system": system})
        return pb.DeleteSourceSystemResponse(deleted=deleted)

    @at_the_edge(DOMAIN)
    async def StartRollout(  # noqa: N802 - gRPC method name
        self, request: rollout_pb2.StartRolloutRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.Rollout:
        """Open a rollout (CANARY); ROLLOUT_OPEN while one of its stage is open."""
        await self._tenants.authenticate_operator(context)
        wanted = rollouts.checked_rollout(request.rollout)
        if self._rollout_rulesets is not None:
            await self._rollout_rulesets.check_start(wanted.candidate_ruleset)
        reply = await self._run(
            self._once(request, rollout_pb2.Rollout),
            lambda s: rollouts.rollout_message(rollouts.start(s, wanted)),
        )
        await self._rollouts_changed()
        log.info(
            "rollout started",
            extra={"rollout": reply.name, "stage": reply.stage, "share": reply.share_basis_points},
        )
        return reply

    @at_the_edge(DOMAIN)
    async def GetRollout(  # noqa: N802 - gRPC method name
        self, request: rollout_pb2.GetRolloutRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.Rollout:
        await self._tenants.authenticate_operator(context)
        rollout_id = rollouts.parse_name(request.name)
        record = await asyncio.to_thread(
            self._tenants.transaction, lambda s: rollouts.get_rollout(s, rollout_id)
        )
        return rollouts.rollout_message(record)

    @at_the_edge(DOMAIN)
    async def ListRollouts(  # noqa: N802 - gRPC method name
        self, request: rollout_pb2.ListRolloutsRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.ListRolloutsResponse:
        """Every rollout (never deleted), newest first; a handful per release."""
        await self._tenants.authenticate_operator(context)
        listed = await asyncio.to_thread(
            self._tenants.transaction,
            lambda s: rollouts.list_rollouts(s, stage=request.stage, open_only=request.open_only),
        )
        return rollout_pb2.ListRolloutsResponse(
            rollouts=[rollouts.rollout_message(record) for record in listed]
        )

    @at_the_edge(DOMAIN)
    async def PromoteRollout(  # noqa: N802 - gRPC method name
        self, request: rollout_pb2.PromoteRolloutRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.Rollout:
        """CANARY → PROMOTED, share 10,000; ROLLOUT_NOT_OPEN otherwise. A
        candidate ruleset becomes its name's current version (``RolloutRulesets``)."""
        operator = await self._tenants.authenticate_operator(context)
        rollout_id = rollouts.parse_name(request.name)
        rulesets = self._rollout_rulesets
        if rulesets is None:
            return await self._close(request, rollout_id, rollouts.promote)
        record = await asyncio.to_thread(
            self._tenants.transaction, lambda s: rollouts.get_rollout(s, rollout_id)
        )
        known = await rulesets.check_promotion(record)

        def promote(connection: Connection, ident: str) -> rollouts.RolloutRecord:
            promoted = rollouts.promote(connection, ident)
            rulesets.promote_in(connection, promoted, known, operator)
            return promoted

        reply = await self._close(request, rollout_id, promote)
        await rulesets.promoted()
        return reply

    @at_the_edge(DOMAIN)
    async def RollbackRollout(  # noqa: N802 - gRPC method name
        self, request: rollout_pb2.RollbackRolloutRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.Rollout:
        """CANARY → ROLLED_BACK, share 0; jobs already pinned keep their track,
        and every ruleset's current version stays as it was."""
        await self._tenants.authenticate_operator(context)
        return await self._close(request, rollouts.parse_name(request.name), rollouts.roll_back)

    @at_the_edge(DOMAIN)
    async def ListCurrentRulesets(  # noqa: N802 - gRPC method name
        self, request: rollout_pb2.ListCurrentRulesetsRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.ListCurrentRulesetsResponse:
        """Each ruleset name's current version (a handful of names)."""
        await self._tenants.authenticate_operator(context)
        current = await asyncio.to_thread(self._tenants.transaction, current_messages)
        return rollout_pb2.ListCurrentRulesetsResponse(rulesets=current)

    @at_the_edge(DOMAIN)
    async def ListQueues(  # noqa: N802 - gRPC method name
        self, request: pb.ListQueuesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListQueuesResponse:
        await self._tenants.authenticate_operator(context)
        if self._queues is None:
            raise NotFound("this admission service reads no queues")
        return await self._queues.read()

    @at_the_edge(DOMAIN)
    async def ListTenantBatches(  # noqa: N802 - gRPC method name
        self, request: pb.ListTenantBatchesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTenantBatchesResponse:
        await self._tenants.authenticate_operator(context)
        return await self._tenant_batches().list(request)

    @at_the_edge(DOMAIN)
    async def GetTenantBatch(  # noqa: N802 - gRPC method name
        self, request: pb.GetTenantBatchRequest, context: grpc.aio.ServicerContext
    ) -> batch_pb2.Batch:
        await self._tenants.authenticate_operator(context)
        return await self._tenant_batches().get(request)

    @at_the_edge(DOMAIN)
    async def ListTenantBatchJobs(  # noqa: N802 - gRPC method name
        self, request: pb.ListTenantBatchJobsRequest, context: grpc.aio.ServicerContext
    ) -> batch_pb2.ListBatchJobsResponse:
        await self._tenants.authenticate_operator(context)
        return await self._tenant_batches().list_jobs(request)

    def _tenant_batches(self) -> TenantBatches:
        if self._batches is None:
            raise NotFound("this admission service takes no batches")
        return self._batches

    async def _close(
        self,
        request: rollout_pb2.PromoteRolloutRequest | rollout_pb2.RollbackRolloutRequest,
        rollout_id: str,
        close: Callable[[Connection, str], rollouts.RolloutRecord],
    ) -> rollout_pb2.Rollout:
        """``close`` the operator's rollout, once per request id."""
        reply = await self._run(
            self._once(request, rollout_pb2.Rollout),
            lambda s: rollouts.rollout_message(close(s, rollout_id)),
        )
        await self._rollouts_changed()
        log.info(
            "rollout closed",
            extra={"rollout": reply.name, "state": rollout_pb2.RolloutState.Name(reply.state)},
        )
        return reply

    async def _rollouts_changed(self) -> None:
        """The queues first (the candidate's cap, then its workers' entry),
        then intake's pinning; a failed sync is made good within seconds by
        every admission replica's own loop."""
        if self._rollout_sync is not None:
            try:
                await self._rollout_sync.sync()
            except Exception as error:  # noqa: BLE001 - recorded; the loop retries
                log.warning("rollout not yet on the queues (%s)", type(error).__name__)
        if self._open_rollouts is not None:
            self._open_rollouts.changed()

    @staticmethod
    def _once(
        request: Message, reply_type: type[M], *, keep: Callable[[M], M] | None = None
    ) -> RequestOnce[M]:
        """The call's request id, remembered in admission's ``request_ids`` for operators."""
        method = f"{pb.DESCRIPTOR.package}.TenantAdminService/{type(request).__name__[:-7]}"
        if keep is None:
            return RequestOnce(tables.request_ids, OPERATORS, method, request, reply_type)
        return RequestOnce(tables.request_ids, OPERATORS, method, request, reply_type, keep)

    async def _run(self, once: RequestOnce[M], act: Callable[[Connection], M]) -> M:
        """``act``'s reply, or the one its request id got before, in one transaction."""
        return await asyncio.to_thread(
            self._tenants.transaction, lambda s: once.run(s, lambda: act(s))
        )
