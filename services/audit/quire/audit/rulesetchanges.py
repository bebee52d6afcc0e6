"""Ruleset-change entries: the current version of a ruleset name, in the ledger.

Admission keeps, per ruleset name, the *current* version: the one a job
that names no version is pinned to (each job's ACCEPTED entry says which it
got). Once set, when admission first saw the name, it changes only when an
operator promotes a rollout with a candidate ruleset (``PROMOTED``); a
rollback leaves it as it was. Admission asks audit to record each change
(``RecordRulesetChange``), again until audit has answered, so the ledger
says which version became current when, from which, by whose rollout.

A change concerns no tenant and no job. Its entry is chained like any
other, on the operators' chain (``CHAIN``, a name no tenant id can take:
tenant ids are hexadecimal), with job empty, both states UNSPECIFIED,
``reason_code`` ``RULESET_CURRENT_CHANGED``, ``ruleset_version`` the new
current version and ``ruleset_change`` saying what changed. The job view
skips it (``quire.jobview.moves_no_job``). The event id is fixed by
the change, so asking again appends nothing.
"""

from __future__ import annotations

import re

from google.protobuf import timestamp_pb2
from sqlalchemy import Connection

from quire.audit import ledger
from quire.errors import FieldViolation, InvalidInput
from quire.idempotency import OPERATORS
from quire.reasons import ReasonCode
from quire.type import queue_pb2

__all__ = ["CHAIN", "PROMOTED", "record_ruleset_change", "ruleset_change_event_id"]

CHAIN = OPERATORS
"""The chain of entries that concern no tenant: operators' system-wide decisions."""
PROMOTED = "PROMOTED"
"""The one cause of a change today: a rollout's candidate ruleset, promoted."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
VERSION = re.compile(r"[0-9]{1,9}")
ROLLOUT = re.compile(r"rollouts/[A-Za-z0-9_-]{1,64}")
ACTORS = {PROMOTED: "operator"}
"""Who makes each kind of change: an operator promotes."""


def ruleset_change_event_id(change: queue_pb2.RulesetChange) -> str:
    """The one event id of this change (so asking again appends nothing)."""
    return f"ruleset.{change.name}.promoted.{change.rollout.removeprefix('rollouts/')}"


def _version_of(name: str, version: str) -> bool:
    """Whether ``version`` is ``name@<digits>``."""
    prefix, at, number = version.partition("@")
    return prefix == name and bool(at) and bool(VERSION.fullmatch(number))


def _violations(change: queue_pb2.RulesetChange, actor: queue_pb2.Actor) -> list[FieldViolation]:
    bad: list[FieldViolation] = []

    def refuse(field: str, description: str) -> None:
        bad.append(FieldViolation(field, description, "BAD_RULESET_CHANGE"))

    if not NAME.fullmatch(change.name):
        refuse("change.name", "1-63 characters of A-Z a-z 0-9 . _ -")
    if not _version_of(change.name, change.current_version):
        refuse("change.current_version", '"name@version" of the change\'s name')
    if change.cause not in ACTORS:
        refuse("change.cause", f"one of {', '.join(ACTORS)}")
    # A promotion before any version was current has no previous one.
    if change.previous_version and not _version_of(change.name, change.previous_version):
        refuse("change.previous_version", '"name@version" of the change\'s name, or empty')
    if not ROLLOUT.fullmatch(change.rollout):
        refuse("change.rollout", '"rollouts/{rollout}"')
    if change.cause in ACTORS and actor.service != ACTORS[change.cause]:
        refuse("actor.service", f"{ACTORS[change.cause]} makes a change of this cause")
    if not actor.instance:
        refuse("actor.instance", "who made the change")
    return bad


def record_ruleset_change(
    connection: Connection,
    change: queue_pb2.RulesetChange,
    changed: timestamp_pb2.Timestamp,
    actor: queue_pb2.Actor,
) -> tuple[str, bool]:
    """Append the change's entry to the operators' chain; returns its event id
    and whether it was new."""
    bad = _violations(change, actor)
    if bad:
        raise InvalidInput(ReasonCode.INVALID_ROLLOUT, "the ruleset change is invalid", tuple(bad))
    event = queue_pb2.TransitionEvent(
        event_id=ruleset_change_event_id(change),
        job="",
        tenant=CHAIN,
        actor=actor,
        reason_code=ReasonCode.RULESET_CURRENT_CHANGED,
        occur_time=changed,
        ruleset_version=change.current_version,
        ruleset_change=change,
    )
    return event.event_id, ledger.append(connection, event)
