"""No state a client saw is later contradicted.

A watch's change names its ledger sequence: the state it showed must be the
one the ledger's fold gives at that entry, and one watch's sequences only
grow. A read (``GetJob``, ``CancelJob``) names no sequence: the state it
showed must be one the job held, and a read made after another observation
had been answered may not show less: not another state after a final one
(``COMPLETED``, ``REJECTED``, ``CANCELLED``), nor an earlier step of the
pipeline. The ledger's outcome is the last read of all. The one way back
is an operator's dead-letter retry (a new generation): a job the ledger
shows retried may be seen at an earlier step after ``FAILED``.

A watch's change is never the later read of that rule: a watch replays the
history after the sequence it is given, so an old state from it is no news.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from quire.invariants_jobs import generations, outcome, transitions
from quire.jobs import state_rank
from quire.pipeline import State
from quire.testing.history.facts import JobRecord, SystemFacts
from quire.testing.history.ops import History, Op, Rpc
from quire.testing.history.verdicts import NO_CONTRADICTION, Verdict, Violation

__all__ = ["no_contradiction", "FINAL"]

FINAL = frozenset({State.COMPLETED, State.REJECTED, State.CANCELLED})
"""States nothing leads out of (FAILED has the dead-letter retry)."""
READS = (Rpc.GET, Rpc.CANCEL)
"""Calls whose answer is the job's state when they were served."""


def no_contradiction(history: History, facts: SystemFacts) -> Verdict:
    found: list[Violation] = []
    seen = history.observations()
    for job, ops in sorted(seen.items()):
        record = facts.jobs.get(job)
        if record is None or not record.entries:
            found.append(Violation(job, f"seen {ops[-1].state}; the ledger holds nothing of it"))
            continue
        found += [Violation(job, detail) for detail in _problems(history, record, ops)]
    return Verdict(NO_CONTRADICTION, sum(len(ops) for ops in seen.values()), tuple(found))


def _problems(history: History, record: JobRecord, ops: list[Op]) -> Iterator[str]:
    yield from _against_ledger(record, ops)
    yield from _watch_order(ops)
    entries = transitions(list(record.entries))
    retried = len(generations(entries)) > 1
    times = [op.monotonic for op in ops]
    strongest = _strongest_so_far(ops)
    for read in (op for op in ops if op.rpc in READS):
        before = bisect.bisect_left(times, history.invoked_at(read))
        if before and _contradicts(strongest[before - 1].state, read.state, retried):
            earlier = strongest[before - 1]
            yield f"seen {earlier.state} ({earlier.process}), then {read.state} ({read.process})"
    final = outcome(entries)
    if ops and _contradicts(strongest[-1].state, final, retried):
        yield f"seen {strongest[-1].state} ({strongest[-1].process}); the ledger ends it {final}"


def _against_ledger(record: JobRecord, ops: list[Op]) -> Iterator[str]:
    held = set(record.views)
    for op in ops:
        if op.rpc == Rpc.WATCH:
            view = record.view_at(op.sequence)
            if view is None:
                yield f"seen {op.state} at sequence {op.sequence}, where it has no ledger entry"
            elif view != op.state:
                yield f"seen {op.state} at sequence {op.sequence}; the ledger shows {view} there"
        elif op.state not in held:
            yield f"seen {op.state} ({op.rpc}), a state the ledger never gave it"


def _watch_order(ops: list[Op]) -> Iterator[str]:
    last: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.rpc != Rpc.WATCH:
            continue
        key = (op.process, op.call)
        if key in last and op.sequence <= last[key]:
            yield f"one watch delivered sequence {op.sequence} after {last[key]}"
        last[key] = op.sequence


def _strongest_so_far(ops: list[Op]) -> list[Op]:
    """For each position, the furthest state observed up to it: what no
    later read may fall below. Of two terminal states the later wins, but
    never over a final one (a FAILED job may be retried and complete; a
    completed one stays so)."""
    strongest: list[Op] = []
    for op in ops:
        if not strongest or _supersedes(op.state, strongest[-1].state):
            strongest.append(op)
        else:
            strongest.append(strongest[-1])
    return strongest


def _supersedes(state: str, held: str) -> bool:
    if state_rank(state) != state_rank(held):
        return state_rank(state) > state_rank(held)
    return held not in FINAL


def _contradicts(earlier: str, later: str, retried: bool) -> bool:
    """Whether a job seen ``earlier`` may not be seen ``later`` afterwards."""
    if earlier in FINAL:
        return later != earlier
    if retried:
        return False
    if earlier == State.FAILED:
        return later != State.FAILED
    return state_rank(later) < state_rank(earlier)
