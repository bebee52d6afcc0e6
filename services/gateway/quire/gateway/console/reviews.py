"""The review queue: parked jobs oldest first, one job's findings beside its
pages, and the decision.

Everything comes from the validator, asked with the person's token: the
queue (``ListReviews``, filtered by tenant, ruleset and reason), the review
(``GetReview``), what each finding expected and found (``ExplainReview``,
computed on request, never kept) and the page images (``RenderPage``, drawn
in the validator's sandbox). A decision needs a note; its request id is
made when the page is served, so a form posted twice decides once.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from quire.gateway.console.pages import Refusal, form_of, render, request_id_of, serve
from quire.gateway.console.sessions import PATH
from quire.gateway.console.staff import CALL_SECONDS, Staff
from quire.reasons import ReasonCode
from quire.validator.v1 import validator_service_pb2 as pb

__all__ = ["router", "job_name", "PAGE_SIZE", "SHOWN_PAGES"]

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 25
SHOWN_PAGES = 3
"""Pages of each flagged source drawn at once; the rest a click away."""
MAX_NOTE_CHARS = 2000
FILTERS = ("tenant", "ruleset", "reason")


def job_name(job: str) -> str:
    """``jobs/{id}`` from a path's id; refused when it is not one."""
    if not job or len(job) > 64 or not all(c.isalnum() or c in "-_" for c in job):
        raise Refusal(404, ReasonCode.NOT_FOUND, "no such job")
    return f"jobs/{job}"


@router.get(f"{PATH}/reviews")
async def review_queue(request: Request) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        chosen = {name: request.query_params.get(name, "").strip()[:200] for name in FILTERS}
        reply = await staff.validator.ListReviews(
            pb.ListReviewsRequest(
                page_size=PAGE_SIZE,
                page_token=request.query_params.get("page_token", ""),
                tenant=_tenant(chosen["tenant"]),
                ruleset=chosen["ruleset"],
                reason_code=chosen["reason"],
            ),
            metadata=staff.metadata,
            timeout=CALL_SECONDS,
        )
        following = ""
        if reply.next_page_token:
            following = urlencode(
                {**{k: v for k, v in chosen.items() if v}, "page_token": reply.next_page_token}
            )
        return render(
            request,
            "reviews.html",
            staff.session,
            reviews=list(reply.reviews),
            chosen=chosen,
            following=following,
        )

    return await serve(request, page)


def _tenant(value: str) -> str:
    if not value:
        return ""
    return value if value.startswith("tenants/") else f"tenants/{value}"


@router.get(f"{PATH}/reviews/{{job}}")
async def review(request: Request, job: str) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        name = job_name(job)
        found = await staff.validator.GetReview(
            pb.GetReviewRequest(job=name), metadata=staff.metadata, timeout=CALL_SECONDS
        )
        explanation = None
        if found.status == "PENDING":
            explanation = await staff.validator.ExplainReview(
                pb.ExplainReviewRequest(job=name), metadata=staff.metadata, timeout=CALL_SECONDS
            )
        flagged = _flagged(found, explanation)
        first = max(1, _int(request.query_params.get("from", "1")))
        return render(
            request,
            "review.html",
            staff.session,
            review=found,
            job=job,
            findings=list(explanation.findings) if explanation else [],
            sources=[s for s in found.sources if s.position in flagged],
            pages=lambda source: range(first, min(source.page_count, first + SHOWN_PAGES - 1) + 1),
            first=first,
            shown=SHOWN_PAGES,
        )

    return await serve(request, page)


def _flagged(found: pb.Review, explanation: pb.ReviewExplanation | None) -> set[int]:
    """Positions the decisions or findings point at (a finding on no source
    in particular flags them all), and every repaired source."""
    positions = {d.position for d in found.decisions if d.outcome != "pass"}
    if explanation is not None:
        positions |= {f.position for f in explanation.findings if f.outcome != "pass"}
    positions |= {s.position for s in found.sources if s.repaired}
    every = {s.position for s in found.sources}
    return every if not positions or positions - every else positions


def _int(text: str) -> int:
    return int(text) if text.isdigit() and len(text) < 7 else 1


@router.post(f"{PATH}/reviews/{{job}}")
async def decide(request: Request, job: str) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        name = job_name(job)
        form = await form_of(request, staff.session)
        decision = str(form.get("decision", ""))
        note = str(form.get("note", "")).strip()
        if decision not in ("approve", "reject"):
            raise Refusal(400, ReasonCode.INVALID_REQUEST, "choose approve or reject")
        if not note or len(note) > MAX_NOTE_CHARS:
            raise Refusal(
                400,
                ReasonCode.INVALID_REQUEST,
                f"a note of 1 to {MAX_NOTE_CHARS} characters is required",
            )
        await staff.validator.ResolveReview(
            pb.ResolveReviewRequest(
                job=name,
                approve=decision == "approve",
                note=note,
                request_id=request_id_of(str(form.get("request_id", ""))),
            ),
            metadata=staff.metadata,
            timeout=CALL_SECONDS,
        )
        target = f"{PATH}/jobs/{job}" if staff.session.is_operator else f"{PATH}/reviews/{job}"
        return RedirectResponse(target, status_code=303)

    return await serve(request, page)
