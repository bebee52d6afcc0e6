"""ValidatorService: decisions, rulesets, reviews, shadow evaluation, and
the source systems a deferred job waits for.

The review calls are staff's: operators' and reviewers' (``STAFF`` in the
access policy, ``OperatorCheck.staff_of`` here); a decision is recorded
under the caller's staff token, never a name the request carries. Shadow
evaluation stays the operators'."""

from __future__ import annotations

import json
from typing import Any

import grpc
from sqlalchemy import select

from quire.database import Database
from quire.errors import FieldViolation, InvalidInput, NotFound
from quire.grpcstatus import at_the_edge
from quire.idempotency import OPERATORS, RequestOnce
from quire.jobs import job_id, job_name, timestamp
from quire.operatorcheck import OperatorCheck
from quire.paging import Page, PageTokens
from quire.reasons import ReasonCode
from quire.type import queue_pb2
from quire.validator import tables
from quire.validator.evaluation import Evaluator
from quire.validator.explaining import Explained
from quire.validator.reviewfilters import ReviewFilter
from quire.validator.reviewinspector import ReviewInspector, checked_width
from quire.validator.reviews import ReviewDesk, ReviewRow
from quire.validator.reviewsources import SourceSeen, sources_of
from quire.validator.rulesets import Ruleset, RulesetBook, canonical, int_or_text
from quire.validator.sources.waits import SourceWaits
from quire.validator.v1 import validator_service_pb2 as pb
from quire.validator.v1 import validator_service_pb2_grpc as pb_grpc

__all__ = ["ValidatorServicer"]

DOMAIN = "validator.quire"
RESOLVE_REVIEW = "quire.validator.v1.ValidatorService/ResolveReview"
LIST_RULESETS = "quire.validator.v1.ValidatorService/ListRulesets"
LIST_REVIEWS = "quire.validator.v1.ValidatorService/ListReviews"
MAX_NOTE = 1000
"""Characters of a review decision's note (the reviews table's column)."""


def _ruleset_order(name: str, version: str) -> tuple[str, tuple[int, str]]:
    return name, int_or_text(version)


def _rulesets_after(rulesets: list[Ruleset], page: Page) -> list[Ruleset]:
    """The book's rulesets (by name, then version) after the page's position."""
    if page.after is None:
        return rulesets[: page.fetch]
    name, version = (str(value) for value in page.after)
    after = _ruleset_order(name, version)
    return [r for r in rulesets if _ruleset_order(r.name, r.version) > after][: page.fetch]


def _findings(findings: list[dict[str, Any]]) -> list[pb.DocumentFinding]:
    return [
        pb.DocumentFinding(
            position=int(f["position"]),
            sha256=str(f["sha256"]),
            detected_type=str(f["detected_type"]),
            page_count=int(f["page_count"]),
            reason_code=str(f["reason"]),
        )
        for f in findings
    ]


def _decisions(decisions: list[dict[str, Any]]) -> list[pb.RuleDecision]:
    return [
        pb.RuleDecision(
            rule=str(d["rule"]),
            outcome=str(d["outcome"]),
            reason_code=str(d["reason_code"]),
            detail=str(d["detail"]),
            position=int(d["position"]),
        )
        for d in decisions
    ]


def _sources(seen: list[SourceSeen]) -> list[pb.ReviewSource]:
    return [
        pb.ReviewSource(
            position=source.position,
            sha256=source.sha256,
            detected_type=source.detected_type,
            page_count=source.page_count,
            repaired=source.repaired,
            rewrite_sha256=source.rewrite_sha256,
            damage_codes=list(source.damage_codes),
        )
        for source in seen
    ]


def _review(review: ReviewRow, seen: list[SourceSeen] | None = None) -> pb.Review:
    message = pb.Review(
        job=review.job,
        status=review.status,
        ruleset_version=review.ruleset,
        decisions=_decisions(review.decisions),
        operator=review.operator or "",
        note=review.note or "",
        create_time=timestamp(review.created_at),
        tenant=f"tenants/{review.tenant}" if review.tenant else "",
        sources=_sources(seen or []),
    )
    if review.resolved_at is not None:
        message.resolve_time.CopyFrom(timestamp(review.resolved_at))
    return message


def _review_findings(explained: list[Explained], seen: list[SourceSeen]) -> list[pb.ReviewFinding]:
    """Each decision's values, with the damage codes of the source it concerns."""
    damage = {source.position: list(source.damage_codes) for source in seen}
    return [
        pb.ReviewFinding(
            rule=finding.rule,
            outcome=finding.outcome,
            reason_code=finding.reason_code,
            position=finding.position,
            subject=finding.subject,
            expected=finding.expected,
            found=finding.found,
            damage_codes=damage.get(finding.position, []),
        )
        for finding in explained
    ]


class ValidatorServicer(pb_grpc.ValidatorServiceServicer):
    """The validator's ValidatorService: validations, rulesets, what deferred jobs
    wait for, reviews for staff (operators and reviewers), and shadow
    evaluation for operators only."""

    def __init__(
        self,
        database: Database,
        *,
        book: RulesetBook,
        reviews: ReviewDesk,
        evaluator: Evaluator,
        operators: OperatorCheck,
        pages: PageTokens,
        waits: SourceWaits | None = None,
        inspector: ReviewInspector | None = None,
    ) -> None:
        self._db = database
        self._waits = waits or SourceWaits(database)
        self._pages = pages
        self._operators = operators
        self._book = book
        self._reviews = reviews
        self._evaluator = evaluator
        self._inspector = inspector
        """Explains reviews and draws their pages, in the sandbox."""

    async def _validation_row(self, name: str):  # type: ignore[no-untyped-def]
        job = job_name(job_id(name))
        table = tables.validations
        row = await self._db.read(
            lambda s: s.execute(select(table).where(table.c.job == job)).first()
        )
        if row is None:
            raise NotFound("no validation for this job")
        return row

    @at_the_edge(DOMAIN)
    async def GetValidation(  # noqa: N802 - gRPC method name
        self, request: pb.GetValidationRequest, context: grpc.aio.ServicerContext
    ) -> pb.Validation:
        row = await self._validation_row(request.job)
        return pb.Validation(
            job=row.job,
            verdict=row.verdict,
            reason_code=row.reason_code,
            lease_token=row.lease_token,
            documents=_findings(row.findings),
            decisions=_decisions(row.decisions),
            ruleset_version=row.ruleset,
            ruleset_digest=row.ruleset_digest,
        )

    @at_the_edge(DOMAIN)
    async def ListRulesets(  # noqa: N802 - gRPC method name
        self, request: pb.ListRulesetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRulesetsResponse:
        page = self._pages.page(LIST_RULESETS, request.page_size, request.page_token)
        # The first page reads what is published now; a later page goes on
        # from its cursor (name and version) over what is known here.
        listed = await self._book.published(fresh=not request.page_token)
        served, token = page.cut(_rulesets_after(listed, page), lambda r: (r.name, r.version))
        return pb.ListRulesetsResponse(
            rulesets=[
                pb.Ruleset(
                    version=r.key,
                    digest=r.digest,
                    description=str(r.body.get("description", "")),
                    body=canonical(r.body).decode(),
                )
                for r in served
            ],
            next_page_token=token,
        )

    @at_the_edge(DOMAIN)
    async def ListReviews(  # noqa: N802 - gRPC method name
        self, request: pb.ListReviewsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListReviewsResponse:
        await self._operators.staff_of(context)
        filters = ReviewFilter.of(
            tenant=request.tenant,
            ruleset=request.ruleset,
            reason_code=request.reason_code,
            include_resolved=request.include_resolved,
        )
        page = self._pages.page(
            LIST_REVIEWS, request.page_size, request.page_token, filters.fingerprint()
        )
        # Only reviews still decidable, or already decided: a job the client
        # cancelled (or that ended otherwise) while parked is left out (``ReviewDesk``).
        rows = await self._reviews.decidable_page(
            after=page.after, limit=page.fetch, filters=filters
        )
        served, token = page.cut(rows, lambda r: (r.created_at, r.job))
        seen = await sources_of(self._db, [r.job for r in served])
        return pb.ListReviewsResponse(
            reviews=[_review(r, seen.get(r.job)) for r in served], next_page_token=token
        )

    @at_the_edge(DOMAIN)
    async def GetReview(  # noqa: N802 - gRPC method name
        self, request: pb.GetReviewRequest, context: grpc.aio.ServicerContext
    ) -> pb.Review:
        """A pending review whose job the client cancelled shows as CANCELLED."""
        await self._operators.staff_of(context)
        review = await self._reviews.get(job_name(job_id(request.job)))
        seen = await sources_of(self._db, [review.job])
        return _review(review, seen.get(review.job))

    @at_the_edge(DOMAIN)
    async def ResolveReview(  # noqa: N802 - gRPC method name
        self, request: pb.ResolveReviewRequest, context: grpc.aio.ServicerContext
    ) -> pb.Review:
        """``request.operator`` is ignored (kept for old clients): the decider
        recorded is the caller's staff token."""
        if len(request.note) > MAX_NOTE:
            raise InvalidInput(
                ReasonCode.INVALID_MANIFEST,
                f"a note of at most {MAX_NOTE} characters",
                (FieldViolation("note", f"at most {MAX_NOTE} characters"),),
            )
        staff = await self._operators.staff_of(context)
        once = RequestOnce(tables.request_ids, OPERATORS, RESOLVE_REVIEW, request, pb.Review)

        async def resolve() -> pb.Review:
            review = await self._reviews.resolve(
                job_name(job_id(request.job)),
                approve=request.approve,
                operator=staff.token,
                note=request.note,
            )
            seen = await sources_of(self._db, [review.job])
            return _review(review, seen.get(review.job))

        return await once.around(self._db, resolve)

    @at_the_edge(DOMAIN)
    async def ExplainReview(  # noqa: N802 - gRPC method name
        self, request: pb.ExplainReviewRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReviewExplanation:
        """Computed in the sandbox from the sealed sources; the values it holds
        are the document's, and are neither stored nor logged."""
        await self._operators.staff_of(context)
        review = await self._reviews.get(job_name(job_id(request.job)))
        seen = (await sources_of(self._db, [review.job])).get(review.job, [])
        explained = await self._review_inspector().explain(review, seen)
        return pb.ReviewExplanation(job=review.job, findings=_review_findings(explained, seen))

    @at_the_edge(DOMAIN)
    async def RenderPage(  # noqa: N802 - gRPC method name
        self, request: pb.RenderPageRequest, context: grpc.aio.ServicerContext
    ) -> pb.RenderedPage:
        """Only for a job with a review (NOT_FOUND otherwise)."""
        await self._operators.staff_of(context)
        width = checked_width(request.width)
        review = await self._reviews.get(job_name(job_id(request.job)))
        image = await self._review_inspector().render(
            review,
            position=request.position,
            rewrite=request.variant == pb.PAGE_VARIANT_REWRITE,
            page=request.page,
            width=width,
        )
        return pb.RenderedPage(
            png=image.png, width=image.width, height=image.height, page_count=image.page_count
        )

    def _review_inspector(self) -> ReviewInspector:
        if self._inspector is None:
            raise NotFound("this validator shows no review's sources")
        return self._inspector

    @at_the_edge(DOMAIN)
    async def EvaluateManifest(  # noqa: N802 - gRPC method name
        self, request: pb.EvaluateManifestRequest, context: grpc.aio.ServicerContext
    ) -> pb.Evaluation:
        await self._operators.operator_of(context)
        row = await self._validation_row(request.job)
        ruleset = await self._book.find(request.ruleset or row.ruleset)
        if ruleset is None:
            raise NotFound("ruleset not found")
        task = queue_pb2.JobTask.FromString(row.task)
        evaluation = await self._evaluator.evaluate(task, ruleset, store_repairs=False)
        return pb.Evaluation(
            job=row.job,
            ruleset_version=ruleset.key,
            ruleset_digest=ruleset.digest,
            verdict=evaluation.verdict,
            reason_code=evaluation.reason,
            documents=_findings(evaluation.findings),
            decisions=_decisions(json.loads(json.dumps(evaluation.decisions_json()))),
        )

    @at_the_edge(DOMAIN)
    async def ListSourceWaits(  # noqa: N802 - gRPC method name
        self, request: pb.ListSourceWaitsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSourceWaitsResponse:
        # Admission's GetJob and WatchJob ask, for a job of the caller's
        # (the access policy admits admission and operators only).
        waits = await self._waits.of(job_name(job_id(request.job)))
        return pb.ListSourceWaitsResponse(waits=[wait.message() for wait in waits])
