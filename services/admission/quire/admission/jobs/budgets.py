"""A job's budget and the deadline it sets (``SubmitJobRequest.budget``).

A job whose manifest names a source by reference gets a budget whether or not
the request gives one (``QUIRE_SOURCE_JOB_BUDGET_SECONDS``); a job of uploads
only gets one when the request asks. The deadline is the acceptance time
plus the budget; it travels in ``JobTask.deadline`` so every stage sees it.

A budget must leave room for one source call after the slice reserved for
render, signing and storage (``QUIRE_JOB_BUDGET_RESERVE_SECONDS``): more than
the reserve plus one second, and at most ``QUIRE_MAX_JOB_BUDGET_SECONDS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Self

from google.protobuf import duration_pb2
from pydantic import Field, model_validator

from quire.environment import Settings, Variable
from quire.errors import FieldViolation, InvalidSetting

__all__ = ["JobBudgets", "BUDGET_FIELD", "MIN_SOURCE_CALL_SECONDS"]

BUDGET_FIELD = "budget"
MIN_SOURCE_CALL_SECONDS = 1.0
"""What a budget must leave, past the reserve, for at least one source call."""


def duration_seconds(duration: duration_pb2.Duration) -> float | None:
    """The duration in seconds, or None when it is not a valid Duration
    (nanos out of range, or of the other sign than seconds)."""
    if not -999_999_999 <= duration.nanos <= 999_999_999:
        return None
    if (duration.seconds > 0 and duration.nanos < 0) or (
        duration.seconds < 0 and duration.nanos > 0
    ):
        return None
    return duration.seconds + duration.nanos / 1e9


class JobBudgets(Settings):
    """The limits every job's budget is held to, checked against each other as
    soon as they are made (``InvalidSetting``)."""

    source_job_budget_seconds: Annotated[float, Variable("QUIRE_SOURCE_JOB_BUDGET_SECONDS")] = (
        Field(default=60.0, ge=0)
    )
    """The budget of a job that names a source by reference and asks for none."""
    reserve_seconds: Annotated[float, Variable("QUIRE_JOB_BUDGET_RESERVE_SECONDS")] = Field(
        default=5.0, ge=0
    )
    """The slice of every budget reserved for render, signing and storage."""
    max_seconds: Annotated[float, Variable("QUIRE_MAX_JOB_BUDGET_SECONDS")] = Field(
        default=3600.0, ge=0
    )
    """The longest budget a request (or a dead-letter retry's ``--budget``) may ask for."""

    @model_validator(mode="after")
    def _fit_together(self) -> Self:
        shortest = self.reserve_seconds + MIN_SOURCE_CALL_SECONDS
        if not self.max_seconds > shortest:
            raise InvalidSetting(
                "QUIRE_MAX_JOB_BUDGET_SECONDS",
                "a number of seconds above QUIRE_JOB_BUDGET_RESERVE_SECONDS + 1",
            )
        if not shortest < self.source_job_budget_seconds <= self.max_seconds:
            raise InvalidSetting(
                "QUIRE_SOURCE_JOB_BUDGET_SECONDS",
                "a number of seconds above QUIRE_JOB_BUDGET_RESERVE_SECONDS + 1"
                " and at most QUIRE_MAX_JOB_BUDGET_SECONDS",
            )
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> JobBudgets:
        return cls.read(env)

    def violations(self, given: duration_pb2.Duration | None) -> list[FieldViolation]:
        """What is wrong with the budget a request asks for (None: it asks for none)."""
        if given is None:
            return []
        seconds = duration_seconds(given)
        if seconds is None:
            return [FieldViolation(BUDGET_FIELD, "not a valid duration", "BUDGET_TOO_SHORT")]
        shortest = self.reserve_seconds + MIN_SOURCE_CALL_SECONDS
        if seconds <= shortest:
            return [
                FieldViolation(
                    BUDGET_FIELD,
                    f"must be more than {shortest:g}s: {self.reserve_seconds:g}s are reserved"
                    " for render, signing and storage, and a source call needs 1s",
                    "BUDGET_TOO_SHORT",
                )
            ]
        if seconds > self.max_seconds:
            return [
                FieldViolation(BUDGET_FIELD, f"at most {self.max_seconds:g}s", "BUDGET_TOO_LONG")
            ]
        return []

    def budget(self, given: duration_pb2.Duration | None, *, references: bool) -> timedelta | None:
        """The job's budget: the one asked for (checked by ``violations``), the
        default for a manifest naming sources by reference, or None."""
        if given is not None:
            return timedelta(seconds=given.seconds, microseconds=given.nanos // 1000)
        if references:
            return timedelta(seconds=self.source_job_budget_seconds)
        return None
