"""The review calls the operator console makes (issue 41), on a real stack,
with a reviewer's token: parked jobs listed by tenant, ruleset and reason;
one review with its tenant and its sources' repairs; why it was parked, with
the values behind each decision (a required clause, a signature field, an
invoice's recomputed total); a page of a repaired source drawn as the
tenant uploaded it and as the validator rewrote it, from the sealed blob in
memory, no plaintext file made on the way; the decision, recorded in the
ledger under the reviewer's token. A tenant's token opens none of it, and a
reviewer's opens nothing else.

One stack for the module, loading the shipped rulesets and ``repair-review``
(``quire.testing.reviews``, which parks the jobs)."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.blobstore import normalized_key
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, TenantAdminClient
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.filewatch import CreatedFiles, files_holding
from quire.testing.ledger import ledger_entries
from quire.testing.reviews import (
    REPAIR_REVIEW,
    Parked,
    park_invoice,
    park_lease,
    park_repaired,
    review_stack_env,
)
from quire.testing.sealedstore import plaintext
from quire.validator.rulesets import DEFAULT_DIRECTORY
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The embedded stack with the shipped rulesets and ``repair-review``
    (overrides conftest's ``stack``)."""
    env = review_stack_env(tmp_path_factory.mktemp("rulesets"), DEFAULT_DIRECTORY)
    running = Stack(
        tmp_path_factory.mktemp("review-console"), env={**env, "QUIRE_DRAIN_SECONDS": "5"}
    )
    running.start()
    yield running
    running.stop()


@dataclass
class Desk:
    """The stubs the console holds, and the tokens it calls them with."""

    validator: vgrpc.ValidatorServiceStub
    admin: admin_grpc.TenantAdminServiceStub
    audit: agrpc.AuditServiceStub
    reviewer: tuple[tuple[str, str], ...]
    reviewer_name: str
    operator: tuple[tuple[str, str], ...]
    tenant: AdmissionClient
    tenant_name: str
    tenant_metadata: tuple[tuple[str, str], ...]


@pytest.fixture
async def desk(stack: Stack) -> AsyncIterator[Desk]:
    """A fresh tenant, a fresh reviewer's token, and the services' stubs."""
    info = StackInfo.read(stack.data_dir)
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
        made = await admin.create_tenant(f"reviewed-{id(stack)}-{len(await admin.list_tenants())}")
        reviewer = await admin.create_token("reviewers")
    assert reviewer.token.name.startswith("reviewers/-/tokens/") and reviewer.secret
    async with (
        grpc.aio.insecure_channel(info.endpoints["validator"]) as validator,
        grpc.aio.insecure_channel(info.endpoints["admission"]) as admission,
        grpc.aio.insecure_channel(info.endpoints["audit"]) as audit,
        AdmissionClient(info.endpoints["admission"], made.secret) as tenant,
    ):
        yield Desk(
            validator=vgrpc.ValidatorServiceStub(validator),
            admin=admin_grpc.TenantAdminServiceStub(admission),
            audit=agrpc.AuditServiceStub(audit),
            reviewer=bearer_metadata(reviewer.secret),
            reviewer_name=reviewer.token.name,
            operator=bearer_metadata(info.operator_token()),
            tenant=tenant,
            tenant_name=made.tenant.name,
            tenant_metadata=bearer_metadata(made.secret),
        )


async def _listed(desk: Desk, **filters: object) -> list[str]:
    reply = await desk.validator.ListReviews(
        vpb.ListReviewsRequest(page_size=1000, **filters),
        metadata=desk.reviewer,  # type: ignore[arg-type]
    )
    return [review.job for review in reply.reviews]


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


async def _render(
    desk: Desk, parked: Parked, variant: int, width: int, page: int = 1
) -> vpb.RenderedPage:
    return await desk.validator.RenderPage(
        vpb.RenderPageRequest(job=parked.job, position=0, variant=variant, page=page, width=width),  # type: ignore[arg-type]
        metadata=desk.reviewer,
        timeout=60,
    )


async def _refused(call: object) -> tuple[grpc.StatusCode, str | None]:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call  # type: ignore[misc]
    return refused.value.code(), reason_of(refused.value)


async def test_a_reviewer_reads_draws_and_approves_a_repaired_source(
    stack: Stack, desk: Desk, tmp_path: Path
) -> None:
    repaired = await park_repaired(desk.tenant, tmp_path)
    lease = await park_lease(desk.tenant, tmp_path)

    mine = await _listed(desk, tenant=desk.tenant_name)
    assert mine == [repaired.job, lease.job], "the tenant's, oldest first"
    assert repaired.job in await _listed(desk, ruleset=REPAIR_REVIEW)
    assert lease.job not in await _listed(desk, ruleset=f"{REPAIR_REVIEW}@1")
    assert await _listed(desk, tenant=desk.tenant_name, ruleset="lease-renewal") == [lease.job]
    assert await _listed(desk, tenant=desk.tenant_name, reason_code="REVIEW_REQUIRED") == mine
    assert await _listed(desk, tenant=desk.tenant_name, reason_code="TOTAL_MISMATCH") == []

    review = await desk.validator.GetReview(
        vpb.GetReviewRequest(job=repaired.job), metadata=desk.reviewer
    )
    assert (review.status, review.tenant, review.ruleset_version) == (
        "PENDING",
        desk.tenant_name,
        f"{REPAIR_REVIEW}@1",
    )
    (source,) = review.sources
    assert (source.position, source.sha256, source.detected_type) == (
        0,
        repaired.sha256,
        "application/pdf",
    )
    assert source.repaired and source.rewrite_sha256 not in ("", repaired.sha256)
    assert "STREAM_LENGTH_RECOVERED" in source.damage_codes and source.page_count == 1

    explained = await desk.validator.ExplainReview(
        vpb.ExplainReviewRequest(job=repaired.job), metadata=desk.reviewer, timeout=60
    )
    (repair,) = explained.findings
    assert (repair.rule, repair.outcome, repair.reason_code, repair.position) == (
        "repair",
        "review",
        "REVIEW_REQUIRED",
        0,
    )
    assert list(repair.damage_codes) == list(source.damage_codes)

    # Both pages drawn from the sealed blobs in memory: no file is made in the
    # validator's directory or the blob store while they are, and neither
    # document's plaintext is anywhere in the stack's data directory after.
    data_dir = Path(stack.data_dir)
    with CreatedFiles(data_dir / "validator", data_dir / "blobs") as watch:
        original = await _render(desk, repaired, vpb.PAGE_VARIANT_ORIGINAL, 640)
        rewrite = await _render(desk, repaired, vpb.PAGE_VARIANT_REWRITE, 0)
    assert watch.created == []
    rewritten = plaintext(
        data_dir, normalized_key(desk.tenant_name.split("/")[1], source.rewrite_sha256)
    )
    for document in (repaired.source.read_bytes(), rewritten):
        assert files_holding(data_dir, document) == []
    assert (original.width, original.page_count) == (640, 1)
    assert _png_size(original.png) == (640, original.height) and original.height > 640
    assert _png_size(rewrite.png) == (800, rewrite.height), "width 0 means 800"

    assert await _refused(_render(desk, lease, vpb.PAGE_VARIANT_REWRITE, 800)) == (
        grpc.StatusCode.NOT_FOUND,
        "SOURCE_NOT_REPAIRED",
    )
    assert await _refused(_render(desk, repaired, vpb.PAGE_VARIANT_ORIGINAL, 800, page=2)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "PAGE_OUT_OF_RANGE",
    )
    assert await _refused(_render(desk, repaired, vpb.PAGE_VARIANT_ORIGINAL, 100)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "WIDTH_OUT_OF_RANGE",
    )

    decided = await desk.validator.ResolveReview(
        vpb.ResolveReviewRequest(
            job=repaired.job, approve=True, note="rewrite reads as the original", operator="ignored"
        ),
        metadata=desk.reviewer,
    )
    assert (decided.status, decided.operator) == ("APPROVED", desk.reviewer_name)
    final = await desk.tenant.wait(repaired.job, timeout=90, stop_when_parked=False)
    assert state_name(final.state) == "COMPLETED"
    approval = [
        entry.event
        for entry in await ledger_entries(data_dir, repaired.job)
        if state_name(entry.event.from_state) == "NEEDS_REVIEW"
    ]
    assert [(e.actor.service, e.actor.instance, state_name(e.to_state)) for e in approval] == [
        ("operator", desk.reviewer_name, "ASSEMBLING")
    ]
    assert await _listed(desk, tenant=desk.tenant_name) == [lease.job]
    assert repaired.job in await _listed(desk, tenant=desk.tenant_name, include_resolved=True)


async def test_why_a_lease_and_an_invoice_were_parked(desk: Desk, tmp_path: Path) -> None:
    lease = await park_lease(desk.tenant, tmp_path)
    explained = await desk.validator.ExplainReview(
        vpb.ExplainReviewRequest(job=lease.job), metadata=desk.reviewer, timeout=60
    )
    found = {finding.rule: finding for finding in explained.findings}
    clause = found["lead-paint-disclosure"]
    assert (clause.outcome, clause.subject, clause.expected, clause.found) == (
        "review",
        "clause:lead-paint-disclosure",
        "lead-based paint",
        "",
    )
    signer = found["landlord-signer"]
    assert (signer.outcome, signer.subject, signer.found) == (
        "review",
        "field:landlord_signature",
        "",
    )
    assert found["tenant-signer"].found == "A. Tenant"
    page = await _render(desk, lease, vpb.PAGE_VARIANT_UNSPECIFIED, 200, page=2)
    assert (page.width, page.page_count) == (200, 2), "unspecified: the original"

    invoice = await park_invoice(desk.tenant, tmp_path)
    explained = await desk.validator.ExplainReview(
        vpb.ExplainReviewRequest(job=invoice.job), metadata=desk.reviewer, timeout=60
    )
    found = {finding.rule: finding for finding in explained.findings}
    assert (found["totals"].subject, found["totals"].expected, found["totals"].found) == (
        "total",
        "60000.00",
        "60000.00",
    )
    above = found["large-invoice"]
    assert (above.outcome, above.expected, above.found) == (
        "review",
        "at most 10000.00",
        "60000.00",
    )
    assert await _refused(_render(desk, invoice, vpb.PAGE_VARIANT_ORIGINAL, 800)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "PAGE_OUT_OF_RANGE",
    ), "a structured source has no pages"

    rejected = await desk.validator.ResolveReview(
        vpb.ResolveReviewRequest(job=invoice.job, approve=False, note="not our customer"),
        metadata=desk.reviewer,
    )
    assert (rejected.status, rejected.operator) == ("REJECTED", desk.reviewer_name)
    final = await desk.tenant.wait(invoice.job, timeout=60, stop_when_parked=False)
    assert (state_name(final.state), final.reason_code) == ("REJECTED", "REVIEW_REJECTED")


async def test_a_tenant_opens_no_review_and_a_reviewer_nothing_but_reviews(desk: Desk) -> None:
    job = "jobs/" + "ab" * 14
    review_calls = [
        lambda m: desk.validator.ListReviews(vpb.ListReviewsRequest(), metadata=m),
        lambda m: desk.validator.GetReview(vpb.GetReviewRequest(job=job), metadata=m),
        lambda m: desk.validator.ExplainReview(vpb.ExplainReviewRequest(job=job), metadata=m),
        lambda m: desk.validator.RenderPage(vpb.RenderPageRequest(job=job, page=1), metadata=m),
        lambda m: desk.validator.ResolveReview(
            vpb.ResolveReviewRequest(job=job, approve=True, note="x"), metadata=m
        ),
    ]
    operator_reads = [
        lambda m: desk.admin.ListQueues(admin_pb.ListQueuesRequest(), metadata=m),
        lambda m: desk.admin.ListTenantBatches(admin_pb.ListTenantBatchesRequest(), metadata=m),
        lambda m: desk.admin.GetTenantBatch(
            admin_pb.GetTenantBatchRequest(tenant=desk.tenant_name, name="batches/" + "0" * 32),
            metadata=m,
        ),
        lambda m: desk.admin.ListTenantBatchJobs(
            admin_pb.ListTenantBatchJobsRequest(
                tenant=desk.tenant_name, parent="batches/" + "0" * 32
            ),
            metadata=m,
        ),
        lambda m: desk.audit.ListDeadLetters(apb.ListDeadLettersRequest(), metadata=m),
        lambda m: desk.validator.EvaluateManifest(vpb.EvaluateManifestRequest(job=job), metadata=m),
    ]
    for call in review_calls + operator_reads:
        code, _reason = await _refused(call(desk.tenant_metadata))
        assert code == grpc.StatusCode.UNAUTHENTICATED
    for call in operator_reads:
        assert await _refused(call(desk.reviewer)) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "REVIEWER_NOT_ALLOWED",
        )
    for call in review_calls[1:]:  # the reviewer is let in, and finds no such review
        code, _reason = await _refused(call(desk.reviewer))
        assert code == grpc.StatusCode.NOT_FOUND
    who = await desk.admin.WhoAmI(admin_pb.WhoAmIRequest(), metadata=desk.reviewer)
    assert (who.token, who.role) == (desk.reviewer_name, "reviewer")
