"""Issue 21: ``quire review list`` (ValidatorService.ListReviews) lists only
jobs that can still be decided. A parked job the client cancelled is no
longer listed — approving it would be refused — while another parked job
still is."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import grpc
import pytest

from quire.client import AdmissionClient, PacketItem
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.stack.supervisor import StackInfo
from quire.testing.operatorcalls import AsOperator
from quire.testing.pdfs import write_form_pdf
from quire.testing.quirecli import run_quire
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

pytestmark = pytest.mark.stack

CLAUSES = (
    "The renewal term is twelve months. Monthly rent: 1,200. Lead-based paint disclosure attached."
)
UNSIGNED = {"property_address": "1 Main St", "tenant_signature": "A. Tenant"}
"""No landlord signature: the lease-renewal ruleset parks the job for review."""


async def _parked_job(client: AdmissionClient, tmp_path: Path) -> str:
    """A job parked in NEEDS_REVIEW. On a machine other tests load, the
    sandbox's time limit may refuse the PDF (PARSER_LIMIT_EXCEEDED): then a
    fresh job, a few times."""
    for _ in range(3):
        path = write_form_pdf(
            tmp_path / f"{uuid.uuid4().hex}.pdf", [CLAUSES, uuid.uuid4().hex], UNSIGNED
        )
        digest = (await client.upload(path)).sha256
        job = await client.submit([PacketItem("lease", digest)], ruleset="lease-renewal")
        parked = await client.wait(job.name, timeout=90)
        if parked.reason_code != "PARSER_LIMIT_EXCEEDED":
            assert state_name(parked.state) == "NEEDS_REVIEW", parked.reason_code
            return job.name
    raise AssertionError("the sandbox kept refusing the lease under load")


async def _listed(validator: vgrpc.ValidatorServiceStub, page_size: int) -> list[str]:
    jobs: list[str] = []
    token = ""
    while True:
        reply = await validator.ListReviews(
            vpb.ListReviewsRequest(page_size=page_size, page_token=token)
        )
        jobs.extend(review.job for review in reply.reviews)
        token = reply.next_page_token
        if not token:
            return jobs


async def test_a_cancelled_parked_job_is_no_longer_listed_for_review(
    stack, client: AdmissionClient, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cancelled = await _parked_job(client, tmp_path)
    kept = await _parked_job(client, tmp_path)

    info = StackInfo.read(stack.data_dir)
    async with grpc.aio.insecure_channel(
        info.endpoints["validator"], interceptors=[AsOperator(info.operator_token())]
    ) as channel:
        validator = vgrpc.ValidatorServiceStub(channel)
        before = await _listed(validator, 50)
        assert cancelled in before and kept in before

        answer = await client.cancel(cancelled)
        assert (state_name(answer.state), answer.reason_code) == (
            "CANCELLED",
            "CANCELLED_BY_CLIENT",
        )

        # Every page size, the smallest included: a left-out row never ends a
        # listing early or shows up on a later page.
        for size in (1, 2, 50):
            listed = await _listed(validator, size)
            assert cancelled not in listed, f"a cancelled job listed (page size {size})"
            assert kept in listed
            assert len(listed) == len(set(listed))

        # What the listing left out is indeed no longer decidable.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await validator.ResolveReview(
                vpb.ResolveReviewRequest(
                    job=cancelled, approve=True, note="too late", operator="ops-carol"
                )
            )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert reason_of(refused.value) == "JOB_CANCELLED"

    shown = await asyncio.to_thread(run_quire, stack.data_dir, "review", "list", "--json")
    assert shown.returncode == 0, shown.stderr
    listed_by_cli = [review["job"] for review in json.loads(shown.stdout)["reviews"]]
    assert cancelled not in listed_by_cli
    assert kept in listed_by_cli

    # The other job is still decidable, and deciding it works.
    async with grpc.aio.insecure_channel(
        info.endpoints["validator"], interceptors=[AsOperator(info.operator_token())]
    ) as channel:
        review = await vgrpc.ValidatorServiceStub(channel).ResolveReview(
            vpb.ResolveReviewRequest(
                job=kept, approve=False, note="not signed", operator="ops-carol"
            )
        )
    assert review.status == "REJECTED"
    final = await client.wait(kept, timeout=60, stop_when_parked=False)
    assert (state_name(final.state), final.reason_code) == ("REJECTED", "REVIEW_REJECTED")
