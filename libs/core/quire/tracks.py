"""Rollout tracks: which side of an open rollout a job is on.

Admission pins each job it accepts to a track (``JobTask.track``), and
every ledger entry of the job carries it (``TransitionEvent.track``):

- ``""`` (no track) when no rollout was open when the job was accepted, so
  jobs accepted while nothing is being rolled out look as they always did;
- ``"candidate"`` or ``"baseline"`` while one is.

The choice is a function of the job id alone (and the tenant, when the
rollout names tenants), so anyone can replay it from the job id and the
rollout's record: ``track_of``. A job's *bucket* is the first eight bytes
of ``sha256(job id)``, big-endian, modulo 10,000; the job is the
candidate's when its bucket is below the rollout's share in basis points.
The job id is the part of ``jobs/{job}`` after the slash (the resource name
is accepted too and means the same id).

**Several open rollouts** (at most one per stage): a job has one track for
all of them. It is ``candidate`` only when it is the candidate's for every
open rollout (its tenant is named by each, or each names none, and its
bucket is below every share), so a stage's candidate never gets more than
the share its operator chose: with a single open rollout the candidate's
share is exactly its share, with several it is the smallest of them (every
rollout hashes the same bucket). ``track_for`` decides this.

This module assigns and replays tracks. Routing by track (candidate
subjects under a consumer holding the rollout's concurrency cap, which only
the candidate's workers pull while the rollout is open) is
``quire.workqueue.routing``'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = [
    "BASELINE",
    "BASIS_POINTS",
    "CANDIDATE",
    "NO_TRACK",
    "TRACKS",
    "RolloutShare",
    "bucket",
    "track_for",
    "track_of",
]

CANDIDATE = "candidate"
BASELINE = "baseline"
NO_TRACK = ""
"""A job accepted while no rollout was open."""
TRACKS = (CANDIDATE, BASELINE)
BASIS_POINTS = 10_000
"""A share of 100 %."""


class RolloutShare(Protocol):
    """What ``track_of`` reads of a rollout: a ``quire.admission.v1.Rollout``
    message, or anything with these two attributes."""

    @property
    def share_basis_points(self) -> int: ...

    @property
    def tenants(self) -> Sequence[str]: ...


def _bare(name: str, collection: str) -> str:
    return name.removeprefix(f"{collection}/")


def bucket(job_id: str) -> int:
    """The job's bucket, 0 to 9,999: sha256 of its id, first 8 bytes, big-endian, mod 10,000."""
    digest = hashlib.sha256(_bare(job_id, "jobs").encode()).digest()
    return int.from_bytes(digest[:8], "big") % BASIS_POINTS


def _names_tenant(rollout: RolloutShare, tenant: str) -> bool:
    named = {_bare(t, "tenants") for t in rollout.tenants}
    return not named or _bare(tenant, "tenants") in named


def track_of(job_id: str, rollout: RolloutShare, tenant: str = "") -> str:
    """``candidate`` or ``baseline``: the job's side of ``rollout`` at the
    share the rollout has (for a closed one, read the share it was opened
    with: ``Rollout.canary_share_basis_points``). ``tenant`` ("tenants/{id}"
    or the id) matters only when the rollout names tenants."""
    if not _names_tenant(rollout, tenant):
        return BASELINE
    return CANDIDATE if bucket(job_id) < rollout.share_basis_points else BASELINE


def track_for(job_id: str, tenant: str, open_rollouts: Iterable[RolloutShare]) -> str:
    """The track admission pins a job to, given the rollouts open when it
    accepts it: ``""`` for none; else ``candidate`` when the job is the
    candidate's for every one of them, ``baseline`` otherwise."""
    rollouts = list(open_rollouts)
    if not rollouts:
        return NO_TRACK
    if all(track_of(job_id, rollout, tenant) == CANDIDATE for rollout in rollouts):
        return CANDIDATE
    return BASELINE
