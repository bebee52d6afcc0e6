"""Which reviews ListReviews lists: by tenant, by ruleset (a name, any
version, or one ``name@version``), by a decision's reason code, and the
resolved ones too when asked.

The tenant is a column of the reviews table; the reason codes of a review's
decisions are rows of ``review_reasons``, written with the review, since its
decisions are JSON. Every filter is a condition on one SQL query, so a page
holds as many rows as were asked for, whatever the filters leave out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, and_, exists, select, true

from quire.errors import FieldViolation, InvalidInput
from quire.reasons import ReasonCode
from quire.validator import tables
from quire.validator.rules import Decision

__all__ = ["ReviewFilter", "record_reasons", "PENDING", "RESOLVED"]

PENDING = "PENDING"
RESOLVED = ("APPROVED", "REJECTED")
"""A decided review's statuses (a cancelled job's review is never listed)."""
TENANT_PREFIX = "tenants/"
MAX_TENANT = 64
MAX_RULESET = 160
MAX_REASON = 64


def _refused(field: str, description: str) -> InvalidInput:
    return InvalidInput(
        ReasonCode.INVALID_MANIFEST,
        f"{field}: {description}",
        (FieldViolation(field, description),),
    )


@dataclass(frozen=True)
class ReviewFilter:
    """A ListReviews request's filters; empty fields filter nothing."""

    tenant: str = ""
    """The tenant's id (the request names ``tenants/{id}``)."""
    ruleset: str = ""
    """``name`` (any version) or ``name@version``."""
    reason_code: str = ""
    include_resolved: bool = False

    @classmethod
    def of(
        cls, *, tenant: str, ruleset: str, reason_code: str, include_resolved: bool
    ) -> ReviewFilter:
        """The filters of a request, checked; INVALID_ARGUMENT for a malformed one."""
        ident = tenant.removeprefix(TENANT_PREFIX)
        if tenant and (not tenant.startswith(TENANT_PREFIX) or not ident or "/" in ident):
            raise _refused("tenant", "tenants/{tenant}, or empty for every tenant")
        if len(ident) > MAX_TENANT:
            raise _refused("tenant", f"a tenant id of at most {MAX_TENANT} characters")
        name, at, version = ruleset.partition("@")
        if ruleset and (not name or (at and not version) or len(ruleset) > MAX_RULESET):
            raise _refused("ruleset", "name or name@version")
        if len(reason_code) > MAX_REASON:
            raise _refused("reason_code", f"at most {MAX_REASON} characters")
        return cls(ident, ruleset, reason_code, include_resolved)

    def fingerprint(self) -> dict[str, str | bool]:
        """What a page token is bound to: the filters that are set."""
        fields: dict[str, str | bool] = {
            "tenant": self.tenant,
            "ruleset": self.ruleset,
            "reason_code": self.reason_code,
            "include_resolved": self.include_resolved,
        }
        return {name: value for name, value in fields.items() if value}

    def statuses(self) -> tuple[str, ...]:
        return (PENDING, *RESOLVED) if self.include_resolved else (PENDING,)

    def condition(self) -> ColumnElement[bool]:
        """The SQL condition on ``tables.reviews`` these filters make."""
        table, reasons = tables.reviews, tables.review_reasons
        terms: list[ColumnElement[bool]] = [table.c.status.in_(self.statuses())]
        if self.tenant:
            terms.append(table.c.tenant == self.tenant)
        if "@" in self.ruleset:
            terms.append(table.c.ruleset == self.ruleset)
        elif self.ruleset:
            terms.append(table.c.ruleset.startswith(f"{self.ruleset}@", autoescape=True))
        if self.reason_code:
            terms.append(
                exists(
                    select(reasons.c.job).where(
                        reasons.c.job == table.c.job, reasons.c.reason_code == self.reason_code
                    )
                )
            )
        return and_(true(), *terms)


def record_reasons(connection: Connection, job: str, decisions: Iterable[Decision]) -> None:
    """The reason codes of a parked job's decisions, for the filter."""
    codes = sorted({decision.reason_code for decision in decisions} - {""})
    if codes:
        connection.execute(
            tables.review_reasons.insert(), [{"job": job, "reason_code": c} for c in codes]
        )
