"""Both example rulesets on the real stack: passing and failing packets, a
review approved and one rejected, and shadow evaluation that changes nothing."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path

import grpc
import pytest

from quire.admission.v1 import admission_service_pb2 as pb
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.stack.supervisor import StackInfo
from quire.testing.ledger import ledger_entries
from quire.testing.operatorcalls import AsOperator
from quire.testing.pdfs import write_form_pdf
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

pytestmark = pytest.mark.stack

CLAUSES = (
    "The renewal term is twelve months. Monthly rent: 1,200. Lead-based paint disclosure attached."
)
SIGNED = {
    "property_address": "1 Main St",
    "tenant_signature": "A. Tenant",
    "landlord_signature": "B. Landlord",
}


def _invoice(total: str, unit_price: str = "0.10") -> bytes:
    body = {
        "invoice_number": f"INV-{uuid.uuid4().hex[:8]}",
        "currency": "EUR",
        "seller": {"name": "Carrier GmbH", "tax_id": "DE123456789"},
        "lines": [{"description": "freight", "quantity": "3", "unit_price": unit_price}],
        "tax_rate": "0",
        "total": total,
    }
    return json.dumps(body).encode()


async def _json_source(client: AdmissionClient, data: bytes) -> str:
    import hashlib

    async def requests():  # type: ignore[no-untyped-def]
        yield pb.UploadSourceRequest(
            header=pb.SourceHeader(
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                content_type="application/json",
            )
        )
        yield pb.UploadSourceRequest(chunk=data)

    return (await client.upload_stream(requests())).sha256


async def _lease(client: AdmissionClient, tmp_path: Path, text: str, fields: dict[str, str]) -> str:
    path = write_form_pdf(tmp_path / f"{uuid.uuid4().hex}.pdf", [text, uuid.uuid4().hex], fields)
    return (await client.upload(path)).sha256


@pytest.fixture
async def validator(stack):  # type: ignore[no-untyped-def]
    """The validator's API, called with the operator token."""
    info = StackInfo.read(stack.data_dir)
    interceptor = AsOperator(info.operator_token())
    async with grpc.aio.insecure_channel(
        info.endpoints["validator"], interceptors=[interceptor]
    ) as channel:
        yield vgrpc.ValidatorServiceStub(channel)


async def test_review_calls_need_an_operator_token(stack) -> None:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    for token in ("", info.token()):  # none, and a tenant's
        interceptors = [AsOperator(token)] if token else []
        async with grpc.aio.insecure_channel(
            info.endpoints["validator"], interceptors=interceptors
        ) as channel:
            stub = vgrpc.ValidatorServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ResolveReview(
                    vpb.ResolveReviewRequest(
                        job="jobs/" + "ab" * 14, approve=True, note="x", operator="me"
                    )
                )
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def _parked(client: AdmissionClient, job: str) -> None:
    final = await client.wait(job, timeout=60)
    assert state_name(final.state) == "NEEDS_REVIEW"


async def test_a_complete_lease_renewal_is_signed_under_its_pinned_ruleset(
    stack,
    client: AdmissionClient,
    validator,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    digest = await _lease(client, tmp_path, CLAUSES, SIGNED)
    job = await client.submit([PacketItem("lease", digest)], ruleset="lease-renewal")
    job = await client.wait(job.name, timeout=60)
    assert state_name(job.state) == "COMPLETED"
    assert job.ruleset_version == "lease-renewal@1"
    validation = await validator.GetValidation(vpb.GetValidationRequest(job=job.name))
    assert validation.verdict == "PASSED" and validation.ruleset_version == "lease-renewal@1"
    assert {d.outcome for d in validation.decisions} == {"pass"}
    committing = next(
        e.event
        for e in await ledger_entries(stack.data_dir, job.name)
        if state_name(e.event.to_state) == "COMMITTING"
    )
    assert committing.ruleset_version == "lease-renewal@1"
    assert committing.ruleset_digest == validation.ruleset_digest != ""


async def test_a_lease_missing_a_clause_is_rejected(
    client: AdmissionClient, tmp_path: Path
) -> None:
    digest = await _lease(client, tmp_path, CLAUSES.replace("Monthly rent", "Rent"), SIGNED)
    job = await client.wait(
        (await client.submit([PacketItem("l", digest)], ruleset="lease-renewal@1")).name
    )
    assert (state_name(job.state), job.reason_code) == ("REJECTED", "REQUIRED_CLAUSE_MISSING")


async def test_a_lease_review_approved_by_an_operator_completes(
    stack,
    client: AdmissionClient,
    validator,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    unsigned = {k: v for k, v in SIGNED.items() if k != "landlord_signature"}
    digest = await _lease(client, tmp_path, CLAUSES, unsigned)
    job = await client.submit([PacketItem("l", digest)], ruleset="lease-renewal")
    await _parked(client, job.name)
    pending = await validator.ListReviews(vpb.ListReviewsRequest())
    assert job.name in [r.job for r in pending.reviews]
    review = await validator.ResolveReview(
        vpb.ResolveReviewRequest(
            job=job.name, approve=True, note="landlord signs on paper", operator="ops-alice"
        )
    )
    # The decider is the caller's token, whatever name the request carries.
    assert review.status == "APPROVED" and review.operator.startswith("operators/-/tokens/")
    final = await client.wait(job.name, timeout=60, stop_when_parked=False)
    assert state_name(final.state) == "COMPLETED"
    approval = next(
        e.event
        for e in await ledger_entries(stack.data_dir, job.name)
        if state_name(e.event.from_state) == "NEEDS_REVIEW"
    )
    assert approval.actor.service == "operator"
    assert approval.actor.instance == review.operator
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await validator.ResolveReview(
            vpb.ResolveReviewRequest(
                job=job.name, approve=False, note="too late", operator="ops-bob"
            )
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_an_invoice_with_a_wrong_total_is_rejected(client: AdmissionClient) -> None:
    digest = await _json_source(client, _invoice(total="0.31"))
    job = await client.wait(
        (await client.submit([PacketItem("inv", digest)], ruleset="logistics-invoice")).name
    )
    assert (state_name(job.state), job.reason_code) == ("REJECTED", "TOTAL_MISMATCH")


async def test_a_correct_invoice_passes_the_validator(client: AdmissionClient, validator) -> None:  # type: ignore[no-untyped-def]
    digest = await _json_source(client, _invoice(total="0.30"))
    job = await client.wait(
        (await client.submit([PacketItem("inv", digest)], ruleset="logistics-invoice")).name
    )
    validation = await validator.GetValidation(vpb.GetValidationRequest(job=job.name))
    assert validation.verdict == "PASSED"
    assert state_name(job.state) == "COMPLETED", "rendered by its profile, then signed"


async def test_a_large_invoice_review_rejected_by_an_operator_ends_rejected(
    stack,
    client: AdmissionClient,
    validator,  # type: ignore[no-untyped-def]
) -> None:
    digest = await _json_source(client, _invoice(total="60000.00", unit_price="20000.00"))
    job = await client.submit([PacketItem("inv", digest)], ruleset="logistics-invoice")
    await _parked(client, job.name)
    await validator.ResolveReview(
        vpb.ResolveReviewRequest(
            job=job.name, approve=False, note="not our customer", operator="ops-bob"
        )
    )
    final = await client.wait(job.name, timeout=60, stop_when_parked=False)
    assert (state_name(final.state), final.reason_code) == ("REJECTED", "REVIEW_REJECTED")


WITNESS_TABLES = ("witness_heads", "witnessed", "witness_log_key")
"""The signer's witness state: it cosigns audit's checkpoints on their own
schedule, whatever any job or evaluation does."""


def _dump(path: Path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return "\n".join(
            line
            for line in db.iterdump()
            if not any(f'"{table}"' in line or f" {table} " in line for table in WITNESS_TABLES)
        )


async def test_shadow_evaluation_changes_nothing(
    stack,
    client: AdmissionClient,
    validator,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    digest = await _lease(
        client, tmp_path, CLAUSES, {k: v for k, v in SIGNED.items() if k != "tenant_signature"}
    )
    job = await client.wait((await client.submit([PacketItem("l", digest)])).name, timeout=60)
    assert state_name(job.state) == "COMPLETED", "the default ruleset has no content rules"
    await asyncio.sleep(0.5)  # let the last events land
    data = Path(stack.data_dir)
    before = {name: _dump(data / name / f"{name}.db") for name in ("validator", "audit", "signer")}
    evaluation = await validator.EvaluateManifest(
        vpb.EvaluateManifestRequest(job=job.name, ruleset="lease-renewal@1")
    )
    assert (evaluation.verdict, evaluation.reason_code) == ("REJECTED", "REQUIRED_FIELD_MISSING")
    assert evaluation.ruleset_version == "lease-renewal@1"
    await asyncio.sleep(0.5)
    after = {name: _dump(data / name / f"{name}.db") for name in ("validator", "audit", "signer")}
    assert after == before, "no state, no ledger entry, no signature"
    assert state_name((await client.get_job(job.name)).state) == "COMPLETED"
