"""Request ids (AIP-155) on every create and operator mutation (issue 17).

Each call is repeated with one ``request_id``: the effect happens once and
the reply is the first one again; the same id with a different request is
refused with ALREADY_EXISTS and ``IDEMPOTENCY_KEY_REUSED``. The tenant admin
calls, CancelJob and the review decision run on the session stack. RotateKey
and the dead-letter decisions run against the real servicers, desk and key
store on a local gRPC server: rotating the shared stack's key, or making a
real dead letter there, would change what other tests see.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import DeadLetters

from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.audit import tables as audit_tables
from quire.audit.servicer import AuditServicer
from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.database import Database
from quire.errors import InvalidInput
from quire.grpcstatus import reason_of
from quire.idempotency import check_request_id
from quire.jobs import state_name
from quire.paging import PageTokens
from quire.reasons import ReasonCode
from quire.signer import tables as signer_tables
from quire.signer.keystore import GeneratedKeys, KeyStore
from quire.signer.servicer import SignerServicer
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import StackInfo
from quire.testing.operatorcalls import AsOperator
from quire.testing.pdfs import write_text_pdf
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

REUSED = "IDEMPOTENCY_KEY_REUSED"


def _rid() -> str:
    return str(uuid.uuid4())


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    return refused.value


async def _reused(call: Any) -> None:
    error = await _refused(call)
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS, error.details()
    assert reason_of(error) == REUSED


@pytest.fixture
async def admin(stack) -> AsyncIterator[TenantAdminClient]:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as client:
        yield client


async def _tenant_named(admin: TenantAdminClient, display_name: str) -> list[admin_pb.Tenant]:
    return [t for t in await admin.list_tenants() if t.display_name == display_name]


@pytest.mark.stack
async def test_create_tenant_and_create_token_once_per_request_id(
    admin: TenantAdminClient,
) -> None:
    name, rid = f"ids-{uuid.uuid4().hex[:8]}", _rid()
    first = await admin.create_tenant(name, max_outstanding_jobs=3, request_id=rid)
    again = await admin.create_tenant(name, max_outstanding_jobs=3, request_id=rid)
    assert first.secret.startswith("qt_") and not first.secret_withheld
    assert again.tenant == first.tenant, "the same tenant, not a second one"
    assert (again.secret, again.secret_withheld) == ("", True), "the secret is shown once"
    assert len(await _tenant_named(admin, name)) == 1
    await _reused(admin.create_tenant(f"{name}-other", request_id=rid))
    await _reused(admin.create_tenant(name, max_outstanding_jobs=4, request_id=rid))
    assert await _tenant_named(admin, f"{name}-other") == []

    tenant, token_rid = first.tenant.name, _rid()
    token = await admin.create_token(tenant, request_id=token_rid)
    token_again = await admin.create_token(tenant, request_id=token_rid)
    assert token_again.token == token.token and token_again.secret_withheld
    assert token.secret and not token_again.secret
    (listed,) = await _tenant_named(admin, name)
    assert len(listed.tokens) == 2, "the first token and one more"
    other = await admin.create_tenant(f"{name}-b")
    await _reused(admin.create_token(other.tenant.name, request_id=token_rid))

    # Without a request_id there is nothing to deduplicate (AIP-155: optional).
    stub = admin._stub  # noqa: SLF001 - the raw call, with an empty request_id
    metadata = admin._metadata  # noqa: SLF001
    for _ in range(2):
        await stub.CreateToken(admin_pb.CreateTokenRequest(tenant=tenant), metadata=metadata)
    (listed,) = await _tenant_named(admin, name)
    assert len(listed.tokens) == 4
    too_long = await _refused(
        stub.CreateToken(
            admin_pb.CreateTokenRequest(tenant=tenant, request_id="x" * 129), metadata=metadata
        )
    )
    assert too_long.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(too_long) == "REQUEST_ID_TOO_LONG"


@pytest.mark.stack
async def test_limits_retention_and_revocation_once_per_request_id(
    admin: TenantAdminClient,
) -> None:
    created = await admin.create_tenant(f"ids-{uuid.uuid4().hex[:8]}")
    tenant = created.tenant.name

    rid = _rid()
    limits = await admin.update_limits(tenant, max_upload_bytes=1000, request_id=rid)
    assert limits.limits.max_upload_bytes == 1000
    assert await admin.update_limits(tenant, max_upload_bytes=1000, request_id=rid) == limits
    await _reused(admin.update_limits(tenant, max_upload_bytes=2000, request_id=rid))

    rid = _rid()
    retention = admin_pb.TenantRetention(sources_seconds=3600)
    kept = await admin.update_retention(tenant, retention, request_id=rid)
    assert kept.retention.sources_seconds == 3600
    assert await admin.update_retention(tenant, retention, request_id=rid) == kept
    await _reused(
        admin.update_retention(tenant, admin_pb.TenantRetention(sources_seconds=60), request_id=rid)
    )
    (listed,) = await _tenant_named(admin, created.tenant.display_name)
    assert (listed.limits.max_upload_bytes, listed.retention.sources_seconds) == (1000, 3600)

    rid = _rid()
    (token,) = created.tenant.tokens
    revoked = await admin.revoke_token(token.name, request_id=rid)
    assert revoked.HasField("revoke_time")
    assert await admin.revoke_token(token.name, request_id=rid) == revoked
    second = await admin.create_token(tenant)
    await _reused(admin.revoke_token(second.token.name, request_id=rid))
    (listed,) = await _tenant_named(admin, created.tenant.display_name)
    assert [t.HasField("revoke_time") for t in listed.tokens].count(True) == 1


@pytest.mark.stack
async def test_forget_source_and_cancel_job_once_per_request_id(
    stack,
    admin: TenantAdminClient,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    info = StackInfo.read(stack.data_dir)
    created = await admin.create_tenant(f"ids-{uuid.uuid4().hex[:8]}")
    other = await admin.create_tenant(f"ids-{uuid.uuid4().hex[:8]}")
    async with (
        AdmissionClient(info.endpoints["admission"], created.secret) as client,
        AdmissionClient(info.endpoints["admission"], other.secret) as other_client,
    ):
        kept = (await client.upload(write_text_pdf(tmp_path / "a.pdf", ["kept"]))).sha256
        gone = (await client.upload(write_text_pdf(tmp_path / "b.pdf", ["gone"]))).sha256
        tenant, rid = created.tenant.name, _rid()
        assert await admin.forget_source(tenant, gone, request_id=rid)
        # A second forget would find nothing (False); the same id replays True.
        assert await admin.forget_source(tenant, gone, request_id=rid)
        assert not await admin.forget_source(tenant, gone)
        await _reused(admin.forget_source(tenant, kept, request_id=rid))

        job = await client.submit([PacketItem("a", kept)])
        rid = _rid()
        cancelled = await client.cancel(job.name, request_id=rid)
        await client.wait(job.name, timeout=30)
        assert await client.cancel(job.name, request_id=rid) == cancelled
        second = await client.submit([PacketItem("a", kept)], priority="batch")
        await _reused(client.cancel(second.name, request_id=rid))
        # Ids are the tenant's own: another tenant's same id is a new request.
        digest = (await other_client.upload(write_text_pdf(tmp_path / "c.pdf", ["c"]))).sha256
        theirs = await other_client.submit([PacketItem("c", digest)])
        assert (await other_client.cancel(theirs.name, request_id=rid)).name == theirs.name


def _invoice() -> bytes:
    return json.dumps(
        {
            "invoice_number": f"INV-{uuid.uuid4().hex[:8]}",
            "currency": "EUR",
            "seller": {"name": "Carrier GmbH", "tax_id": "DE123456789"},
            "lines": [{"description": "freight", "quantity": "3", "unit_price": "20000.00"}],
            "tax_rate": "0",
            "total": "60000.00",
        }
    ).encode()


async def _json_upload(client: AdmissionClient, data: bytes) -> str:
    async def requests() -> AsyncIterator[pb.UploadSourceRequest]:
        yield pb.UploadSourceRequest(
            header=pb.SourceHeader(
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                content_type="application/json",
            )
        )
        yield pb.UploadSourceRequest(chunk=data)

    return (await client.upload_stream(requests())).sha256


@pytest.mark.stack
async def test_a_review_decision_once_per_request_id(stack, client: AdmissionClient) -> None:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    digest = await _json_upload(client, _invoice())
    job = await client.submit([PacketItem("inv", digest)], ruleset="logistics-invoice")
    parked = await client.wait(job.name, timeout=60)
    assert state_name(parked.state) == "NEEDS_REVIEW"
    async with grpc.aio.insecure_channel(
        info.endpoints["validator"], interceptors=[AsOperator(info.operator_token())]
    ) as channel:
        validator = vgrpc.ValidatorServiceStub(channel)
        rid = _rid()
        decision = vpb.ResolveReviewRequest(
            job=job.name, approve=False, note="not ours", operator="ops-ids", request_id=rid
        )
        first = await validator.ResolveReview(decision)
        assert first.status == "REJECTED"
        assert await validator.ResolveReview(decision) == first
        changed = vpb.ResolveReviewRequest()
        changed.CopyFrom(decision)
        changed.note = "another note"
        await _reused(validator.ResolveReview(changed))
    final = await client.wait(job.name, timeout=30, stop_when_parked=False)
    assert state_name(final.state) == "REJECTED"
    async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
        entries = await agrpc.AuditServiceStub(channel).ListJobEvents(
            apb.ListJobEventsRequest(job=job.name, page_size=100),
            metadata=bearer_metadata(info.operator_token()),
        )
    decided = [e for e in entries.entries if state_name(e.event.from_state) == "NEEDS_REVIEW"]
    assert len(decided) == 1, "one decision in the ledger"


# -- the signer's RotateKey and audit's dead-letter desk, on a local server --


class _Operators:
    async def operator_of(self, context: object) -> str:
        return "op-test"


async def _serve(register: Any) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def test_rotate_key_once_per_request_id(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", signer_tables.metadata)
    database.create_schema()
    keys = KeyStore(database, GeneratedKeys(tmp_path / "keys"))
    keys.ensure_active_key()
    servicer = SignerServicer(database, keys, pages=PageTokens.ephemeral())
    server, address = await _serve(lambda s: sgrpc.add_SignerServiceServicer_to_server(servicer, s))
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            signer = sgrpc.SignerServiceStub(channel)
            rid = _rid()
            rotated = await signer.RotateKey(spb.RotateKeyRequest(request_id=rid))
            assert await signer.RotateKey(spb.RotateKeyRequest(request_id=rid)) == rotated
            assert [k.version for k in await keys.all()][-1] == rotated.version
            assert len(await keys.all()) == 2, "one rotation"
            await signer.RotateKey(spb.RotateKeyRequest(request_id=_rid()))
            assert len(await keys.all()) == 3, "a new id rotates again"
    finally:
        await server.stop(None)
        database.close()


async def test_dead_letter_retry_and_discard_once_per_request_id(
    dead_letters: DeadLetters,
) -> None:
    database, publisher = dead_letters.database, dead_letters.publisher
    servicer = AuditServicer(database, dead_letters=dead_letters.desk, operators=_Operators())  # type: ignore[arg-type]

    def dead(job: str, generation: int) -> None:
        """``job`` FAILED at sign after its retries, its letter dead."""
        dead_letters.seed(
            job,
            stage="sign",
            reason_code="RETRY_LIMIT_REACHED",
            generation=generation,
            deliveries=2,
        )

    server, address = await _serve(lambda s: agrpc.add_AuditServiceServicer_to_server(servicer, s))
    job, other = "jobs/" + "a1" * 14, "jobs/" + "b2" * 14
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            audit = agrpc.AuditServiceStub(channel)
            dead(job, 0)
            rid = _rid()
            retried = await audit.RetryDeadLetter(
                apb.RetryDeadLetterRequest(job=job, request_id=rid)
            )
            assert retried.status == "retried" and len(publisher.sent) == 1
            # The retried job dies again: a repeat of the first request must
            # not retry it a second time, a new request does.
            dead(job, 1)
            again = await audit.RetryDeadLetter(apb.RetryDeadLetterRequest(job=job, request_id=rid))
            assert again == retried and len(publisher.sent) == 1, "one retry"
            await _reused(
                audit.RetryDeadLetter(apb.RetryDeadLetterRequest(job=other, request_id=rid))
            )
            await audit.RetryDeadLetter(apb.RetryDeadLetterRequest(job=job, request_id=_rid()))
            assert len(publisher.sent) == 2

            dead(other, 0)
            rid = _rid()
            discarded = await audit.DiscardDeadLetter(
                apb.DiscardDeadLetterRequest(job=other, request_id=rid)
            )
            assert discarded.status == "discarded"
            dead(other, 1)
            assert (
                await audit.DiscardDeadLetter(
                    apb.DiscardDeadLetterRequest(job=other, request_id=rid)
                )
                == discarded
            )
            letter = await database.read(
                lambda s: s.execute(
                    audit_tables.dead_letters.select().where(
                        audit_tables.dead_letters.c.job == other
                    )
                ).one()
            )
            assert letter.status == "dead", "the repeat discarded nothing"
            await _reused(
                audit.DiscardDeadLetter(apb.DiscardDeadLetterRequest(job=job, request_id=rid))
            )
            # Ids are per method: the discard's id is new to RetryDeadLetter.
            assert (
                await audit.RetryDeadLetter(apb.RetryDeadLetterRequest(job=other, request_id=rid))
            ).status == "retried"
    finally:
        await server.stop(None)
        database.close()


def test_a_request_id_is_refused_for_exactly_the_control_characters_it_holds() -> None:
    """Every ASCII character and a sample beyond: refused iff its Unicode
    category is C (control, format, surrogate, private use, unassigned)."""
    sample = [*range(0x80), 0x85, 0xA0, 0xE9, 0x200B, 0x202E, 0x2028, 0x3000, 0xE000, 0x1F600]
    for code in sample:
        request_id = f"a{chr(code)}b"
        unprintable = unicodedata.category(chr(code)).startswith("C")
        try:
            check_request_id(request_id)
        except InvalidInput as refused:
            assert unprintable and refused.reason == ReasonCode.REQUEST_ID_INVALID, hex(code)
        else:
            assert not unprintable, hex(code)


@pytest.mark.stack
async def test_a_request_id_with_an_unprintable_character_is_refused(  # type: ignore[no-untyped-def]
    client: AdmissionClient, tmp_path: Path
) -> None:
    """NUL, DEL, a C1 control and a right-to-left override are refused as
    REQUEST_ID_INVALID, and nothing is accepted; a printable non-ASCII id is fine."""
    from quire.testing.pdfs import write_text_pdf

    pdf = write_text_pdf(tmp_path / "d.pdf", [f"ids {uuid.uuid4().hex}"])
    digest = (await client.upload(pdf)).sha256
    for unprintable in ("\x00", "a\x7fb", "a\x85b", "rent\u202eexe.pdf"):
        refused = await _refused(client.submit([PacketItem("d", digest)], request_id=unprintable))
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason_of(refused) == "REQUEST_ID_INVALID"
    accepted = await client.submit([PacketItem("d", digest)], request_id=f"bail-é-{_rid()}")
    assert accepted.name
