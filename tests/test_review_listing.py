"""ListReviews, GetReview and ResolveReview for staff (issue 41), on the
validator's own tables: reviews filtered by tenant, by ruleset (a name or
one version) and by a decision's reason code, oldest first, resolved ones
only when asked; a page token answers only the filters it was issued for;
each review names its tenant and its sources as inspection found them (a
repair's rewrite and damage codes); a decision records the caller's staff
token, whatever name the request carries; and reviews parked before the
tenant and reason codes were kept get them from the migration.

Reviews are written as the stage writes them (``work._record``); the
decider is a stand-in for admission's WhoAmI, the publisher keeps what it is
handed. The same on a running stack: tests/test_review_console.py."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from alembic import command
from grpc_status import rpc_status

from quire.database import Database
from quire.migrations import _config
from quire.operatorcheck import Staff
from quire.paging import PageTokens
from quire.pipeline import Verdict
from quire.schema import upgrade_schema
from quire.type import job_pb2, queue_pb2
from quire.validator import tables, work
from quire.validator.evaluation import Evaluation
from quire.validator.reviews import ReviewDesk
from quire.validator.rules import Decision
from quire.validator.rulesets import Ruleset, RulesetBook
from quire.validator.servicer import ValidatorServicer
from quire.validator.v1 import validator_service_pb2 as pb

REVIEWER = Staff(token="reviewers/-/tokens/0123456789ab", role="reviewer")


class Refused(Exception):  # noqa: N818 - the status a call ended with
    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason


class Call:
    """The part of a servicer context these calls use: a refusal raises ``Refused``."""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", "Bearer reviewer"),)

    async def abort_with_status(self, status: Any) -> None:
        from google.rpc import error_details_pb2, status_pb2

        rich = status_pb2.Status.FromString(
            dict(status.trailing_metadata)[rpc_status.GRPC_DETAILS_METADATA_KEY]
        )
        info = error_details_pb2.ErrorInfo()
        rich.details[0].Unpack(info)
        raise Refused(status.code, info.reason)


class Reviewer:
    """Admission's answer for every call: the reviewer above."""

    async def staff_of(self, _context: object) -> Staff:
        return REVIEWER


@dataclass
class Published:
    """The publisher ReviewDesk hands events and tasks to, keeping them."""

    events: list[queue_pb2.TransitionEvent] = field(default_factory=list)
    tasks: list[queue_pb2.JobTask] = field(default_factory=list)

    async def publish(self, _subject: str, event: Any, _message_id: str) -> None:
        self.events.append(event)

    async def publish_task(self, _stage: str, task: Any) -> None:
        self.tasks.append(task)


@dataclass
class Desk:
    database: Database
    servicer: ValidatorServicer
    published: Published


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    database = Database(f"sqlite:///{tmp_path / 'validator.db'}", tables.metadata)
    database.create_schema()
    published = Published()
    servicer = ValidatorServicer(
        database,
        book=RulesetBook(database),
        reviews=ReviewDesk(database, published),  # type: ignore[arg-type]
        evaluator=None,  # type: ignore[arg-type] - no shadow evaluation here
        operators=Reviewer(),  # type: ignore[arg-type]
        pages=PageTokens.ephemeral(),
    )
    yield Desk(database, servicer, published)
    database.close()


def _ruleset(name: str, version: str = "1") -> Ruleset:
    return Ruleset.from_body({"name": name, "version": version, "rules": []})


def _park(
    desk: Desk,
    *,
    tenant: str,
    ruleset: Ruleset,
    reasons: tuple[str, ...] = ("REVIEW_REQUIRED",),
    repaired: bool = False,
) -> str:
    """A review written as the stage writes it, with one source."""
    job = f"jobs/{uuid.uuid4().hex[:28]}"
    digest, rewrite = "a" * 64, "b" * 64 if repaired else ""
    source = job_pb2.SourceRef(
        position=0, sha256=digest, content_type="application/pdf", blob_key=f"sources/{tenant}/x"
    )
    if repaired:
        source.repair.CopyFrom(
            job_pb2.SourceRepair(position=0, sha256=digest, normalized_sha256=rewrite)
        )
    task = queue_pb2.JobTask(job=job, tenant=tenant, ruleset=ruleset.key, sources=[source])
    finding = {
        "position": 0,
        "sha256": digest,
        "detected_type": "application/pdf",
        "page_count": 2,
        "reason": "",
        "warnings": ["STREAM_LENGTH_RECOVERED"] if repaired else [],
        "normalized_sha256": rewrite,
        "differing_pages": [],
    }
    decisions = [Decision("rule-" + code.lower(), "review", code, "", 0) for code in reasons]
    evaluation = Evaluation(Verdict.NEEDS_REVIEW, "REVIEW_REQUIRED", [finding], decisions)
    desk.database.transaction(work._record(task, ruleset, evaluation, 1))  # noqa: SLF001 - the stage's own writer
    return job


async def _listed(desk: Desk, **asked: Any) -> list[str]:
    jobs, token = [], ""
    while True:
        reply = await desk.servicer.ListReviews(
            pb.ListReviewsRequest(page_size=1, page_token=token, **asked), Call()
        )
        jobs += [review.job for review in reply.reviews]
        token = reply.next_page_token
        if not token:
            return jobs


async def test_reviews_are_listed_by_tenant_ruleset_and_reason_oldest_first(desk: Desk) -> None:
    lease1, lease2, invoice = _ruleset("lease"), _ruleset("lease", "2"), _ruleset("invoice")
    first = _park(desk, tenant="t1", ruleset=lease1)
    second = _park(desk, tenant="t2", ruleset=lease2, reasons=("REVIEW_REQUIRED", "TOTAL_MISMATCH"))
    third = _park(desk, tenant="t1", ruleset=invoice, reasons=("TOTAL_MISMATCH",))

    assert await _listed(desk) == [first, second, third]
    assert await _listed(desk, tenant="tenants/t1") == [first, third]
    assert await _listed(desk, ruleset="lease") == [first, second], "a name: every version"
    assert await _listed(desk, ruleset="lease@2") == [second]
    assert await _listed(desk, ruleset="lea") == [], "a name is matched whole"
    assert await _listed(desk, reason_code="TOTAL_MISMATCH") == [second, third]
    assert await _listed(desk, tenant="tenants/t1", reason_code="TOTAL_MISMATCH") == [third]
    assert await _listed(desk, tenant="tenants/nobody") == []


async def test_a_page_token_answers_only_the_filters_it_was_issued_for(desk: Desk) -> None:
    ruleset = _ruleset("lease")
    for _ in range(3):
        _park(desk, tenant="t1", ruleset=ruleset)
    reply = await desk.servicer.ListReviews(
        pb.ListReviewsRequest(page_size=1, tenant="tenants/t1"), Call()
    )
    assert reply.next_page_token
    for other in ({}, {"tenant": "tenants/t2"}, {"tenant": "tenants/t1", "include_resolved": True}):
        with pytest.raises(Refused) as refused:
            await desk.servicer.ListReviews(
                pb.ListReviewsRequest(page_size=1, page_token=reply.next_page_token, **other),
                Call(),
            )
        assert (refused.value.code, refused.value.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_PAGE",
        )


async def test_a_decision_records_the_callers_token_and_resolved_reviews_list_on_request(
    desk: Desk,
) -> None:
    ruleset = _ruleset("lease")
    decided, waiting = (
        _park(desk, tenant="t1", ruleset=ruleset),
        _park(desk, tenant="t1", ruleset=ruleset),
    )
    review = await desk.servicer.ResolveReview(
        pb.ResolveReviewRequest(job=decided, approve=True, note="seen", operator="someone else"),
        Call(),
    )
    assert (review.status, review.operator) == ("APPROVED", REVIEWER.token)
    (event,) = desk.published.events
    assert (event.actor.service, event.actor.instance) == ("operator", REVIEWER.token)
    assert [task.job for task in desk.published.tasks] == [decided]

    assert await _listed(desk) == [waiting]
    assert await _listed(desk, include_resolved=True) == [decided, waiting]
    shown = await desk.servicer.GetReview(pb.GetReviewRequest(job=decided), Call())
    assert (shown.status, shown.operator, shown.note) == ("APPROVED", REVIEWER.token, "seen")


async def test_a_review_names_its_tenant_and_its_sources_repairs(desk: Desk) -> None:
    job = _park(desk, tenant="t1", ruleset=_ruleset("repair"), repaired=True)
    review = await desk.servicer.GetReview(pb.GetReviewRequest(job=job), Call())
    assert review.tenant == "tenants/t1"
    (source,) = review.sources
    assert (source.position, source.sha256, source.detected_type, source.page_count) == (
        0,
        "a" * 64,
        "application/pdf",
        2,
    )
    assert (source.repaired, source.rewrite_sha256, list(source.damage_codes)) == (
        True,
        "b" * 64,
        ["STREAM_LENGTH_RECOVERED"],
    )
    (listed,) = (await desk.servicer.ListReviews(pb.ListReviewsRequest(), Call())).reviews
    assert listed == review

    with pytest.raises(Refused) as refused:
        await desk.servicer.GetReview(pb.GetReviewRequest(job="jobs/" + "c" * 28), Call())
    assert refused.value.code == grpc.StatusCode.NOT_FOUND


def test_reviews_parked_before_0007_get_their_tenant_and_reason_codes(tmp_path: Path) -> None:
    path = tmp_path / "validator.db"
    database = Database(f"sqlite:///{path}", tables.metadata)
    with database.engine.begin() as connection:
        command.upgrade(_config(tables.MIGRATIONS, connection, tables.metadata), "0006")
    task = queue_pb2.JobTask(job="jobs/old", tenant="t9", ruleset="lease@1")
    decisions = [
        {"rule": "a", "outcome": "pass", "reason_code": "", "detail": "", "position": 0},
        {
            "rule": "b",
            "outcome": "review",
            "reason_code": "REVIEW_REQUIRED",
            "detail": "",
            "position": -1,
        },
    ]
    with sqlite3.connect(path) as plain:
        plain.execute(
            "INSERT INTO reviews (job, status, ruleset, decisions, next_task, created_at)"
            " VALUES (?, 'PENDING', 'lease@1', ?, ?, '2026-12-01 10:00:00.000000')",
            ("jobs/old", json.dumps(decisions), task.SerializeToString()),
        )
    upgrade_schema(database, tables.metadata, tables.MIGRATIONS)
    with database.engine.connect() as connection:
        tenant = connection.exec_driver_sql("SELECT tenant FROM reviews").scalar_one()
        reasons = connection.exec_driver_sql("SELECT job, reason_code FROM review_reasons").all()
    assert tenant == "t9"
    assert [tuple(row) for row in reasons] == [("jobs/old", "REVIEW_REQUIRED")]
    database.close()
