"""The ledger's hash chains, and what verifying them finds, over rows as
they are stored: audit checks its own database with it (``quire audit
verify``), and the operator tools check what audit exports (``quire check``)
with the same rules, so that neither trusts a column, an index row or a
head row over the hashed bytes.

Each tenant's entries form a chain: ``entry_hash = sha256(prev_hash ||
event bytes)``, the first ``prev_hash`` being ``GENESIS``.

What each finding means:
- ``edited``: an entry's stored hash does not match its content;
- ``deleted``: an entry is missing: its successor links to an unknown hash,
  the tenant's chain is shorter than its head row says, or (where the
  owner says a gap in the global sequence is one, as on SQLite, where a
  rolled-back insert uses up no number) the sequence has a gap.
  PostgreSQL's sequences are not transactional: an append rolled back, or
  cut off by a killed replica, leaves a gap that deleted nothing, and a
  concurrent append still uncommitted leaves one for a moment; there the
  chains and head rows alone say what is missing;
- ``inserted``: an entry sits between two entries that link to each other;
- ``reordered``: an entry links to an entry that is not its predecessor;
- ``checkpoint``: the chain no longer has, at a signed checkpoint's length,
  the head that checkpoint recorded (a rewrite that recomputed the hashes),
  or the tenant's Merkle tree no longer has the root its signed log head
  (tlog-checkpoint note) recorded;
- ``checkpoint_file``: a file among the checkpoints that audit's key did not
  sign as it stands (an edited or forged checkpoint); ``column`` names it;
- ``checkpoint_missing``: a checkpoint a later one names as its predecessor
  is gone;
- ``checkpoint_time``: a checkpoint is dated before a shorter checkpoint of
  its tenant (its time went back), or its time is not a time; the
  sequence is its length;
- ``column``: a stored column (event id, job, tenant, states, reason) says
  something other than the hashed event it sits beside — ``column`` names it;
- ``undecodable``: the hashed bytes are not an event at all;
- ``view``: the job index disagrees with what the job's events fold to
  (``quire.jobview``) — ``column`` names the field, ``job`` the job.

A retirement entry (bytes deleted under the retention policy) and a
ruleset-change entry (on the operators' chain) are chained, hashed and
column-checked like every entry, and fold into no view.

Rows are read by attribute (``row.sequence``, ``row.event``, ...): a
database row, or a record a service exported. Any column may hold any type
(a row rewritten in the database, or a value the exporter could not call
text): each such value is a finding, never an error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from google.protobuf.message import DecodeError

from quire.checkpoint import Checkpoint as LogHead
from quire.checkpointfiles import ChainCheckpoint
from quire.jobs import state_name
from quire.jobview import COMPARED, JobFacts, apply, moves_no_job
from quire.merkle import MerkleTree, leaf_hash
from quire.type import queue_pb2

__all__ = [
    "GENESIS",
    "COLUMNS",
    "entry_hash",
    "Finding",
    "LedgerReport",
    "HeadRow",
    "verify_chains",
]

GENESIS = "0" * 64
"""The ``prev_hash`` of each tenant's first entry."""

COLUMNS = ("event_id", "job", "tenant", "from_state", "to_state", "reason_code")
"""The stored columns that restate what the hashed event says."""


def entry_hash(prev_hash: str, event_bytes: bytes) -> str:
    """An entry's hash: sha256 of the previous entry's hash (its 32 bytes)
    followed by the event's bytes, lower-case hex."""
    return hashlib.sha256(bytes.fromhex(prev_hash) + event_bytes).hexdigest()


@dataclass(frozen=True)
class Finding:
    """One thing verification found wrong: its ``kind`` (the module's list), at
    entry ``sequence`` of ``tenant``'s chain."""

    kind: str
    sequence: int
    tenant: str
    column: str = ""
    job: str = ""


@dataclass(frozen=True)
class LedgerReport:
    """What one verification of the whole ledger covered, and what it found;
    ``ok`` when it found nothing."""

    entries: int
    chains: int
    checkpoints_checked: int
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        return not self.findings


class HeadRow(Protocol):
    """A tenant's chain head row: the length and head its appends left."""

    @property
    def tenant(self) -> str: ...
    @property
    def head_hash(self) -> Any: ...
    @property
    def length(self) -> int: ...


@dataclass
class _Entry:
    sequence: int
    prev_hash: Any
    entry_hash: Any


def _links(tenant: str, chain: list[_Entry]) -> Iterable[Finding]:
    known = {entry.entry_hash for entry in chain}
    for index, entry in enumerate(chain):
        expected = chain[index - 1].entry_hash if index else GENESIS
        if entry.prev_hash == expected:
            continue
        before_previous = chain[index - 2].entry_hash if index >= 2 else GENESIS
        if index >= 1 and entry.prev_hash == before_previous:
            yield Finding("inserted", chain[index - 1].sequence, tenant)
        elif entry.prev_hash in known:
            yield Finding("reordered", entry.sequence, tenant)
        else:
            yield Finding("deleted", entry.sequence, tenant)


def _said(event: queue_pb2.TransitionEvent) -> dict[str, str]:
    """What each stored column must hold, as the hashed event says it."""
    return {
        "event_id": event.event_id,
        "job": event.job,
        "tenant": event.tenant,
        "from_state": state_name(event.from_state),
        "to_state": state_name(event.to_state),
        "reason_code": event.reason_code,
    }


def _blob(value: object) -> bytes | None:
    """A column's value as bytes, or None when it holds something else."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _recomputed(prev_hash: object, event: bytes | None) -> str | None:
    """The entry hash the row's own bytes give, or None when they cannot give one."""
    if event is None or not isinstance(prev_hash, str):
        return None
    try:
        return entry_hash(prev_hash, event)
    except ValueError:  # prev_hash is no hex
        return None


def _columns(row: Any, views: dict[str, JobFacts], last: dict[str, int]) -> Iterable[Finding]:
    """Check a row's columns against its bytes, and fold its event into the views."""
    sequence, tenant = row.sequence, _text(row.tenant)
    data = _blob(row.event)
    try:
        if data is None:
            raise ValueError("not bytes")
        event = queue_pb2.TransitionEvent.FromString(data)
        said = _said(event)
    except (DecodeError, ValueError):
        yield Finding("undecodable", sequence, tenant)
        return
    for column in COLUMNS:
        if getattr(row, column) != said[column]:
            yield Finding("column", sequence, tenant, column=column)
    if moves_no_job(event):
        return
    views[event.job] = apply(views.get(event.job), event)
    last[event.job] = sequence


def _view_findings(
    index: Iterable[Any], views: dict[str, JobFacts], last: dict[str, int]
) -> Iterable[Finding]:
    """The job index against the folded events: every disagreeing field, and
    index rows with no events (or events with no index row)."""
    indexed = set()
    for row in index:
        job, tenant = str(row.job), _text(row.tenant)
        indexed.add(job)
        folded = views.get(job)
        if folded is None:
            yield Finding("view", 0, tenant, column="job", job=job)
            continue
        for column in COMPARED:
            if getattr(row, column) != getattr(folded, column):
                yield Finding("view", last[job], tenant, column=column, job=job)
    for job in views.keys() - indexed:
        yield Finding("view", last[job], views[job].tenant, column="job", job=job)


def _head_row_findings(
    chains: dict[str, list[_Entry]], head_rows: Iterable[HeadRow]
) -> Iterable[Finding]:
    """Each tenant's chain against its head row, written in the same
    transaction as every append: a chain shorter than the row's length lost
    entries at its end (which no successor's link shows); one whose entry at
    that length is not the row's head was rewritten."""
    for head in head_rows:
        tenant, length = head.tenant, head.length
        chain = chains.get(tenant, [])
        if len(chain) < length:
            yield Finding("deleted", chain[-1].sequence + 1 if chain else 0, tenant)
        elif length and chain[length - 1].entry_hash != head.head_hash:
            yield Finding("checkpoint", chain[length - 1].sequence, tenant, column="chain head")


def _log_head_findings(
    trees: dict[str, MerkleTree], heads: Iterable[tuple[str, LogHead]]
) -> Iterable[Finding]:
    """Each signed log head against the tenant's tree as the ledger rebuilds it."""
    for tenant, head in heads:
        tree = trees.get(tenant)
        if tree is None or tree.size < head.size or tree.root(head.size) != head.root_hash:
            yield Finding("checkpoint", head.size, tenant, column="log head")


def _checkpoint_findings(
    chains: dict[str, list[_Entry]], checkpoints: Iterable[ChainCheckpoint]
) -> tuple[int, list[Finding]]:
    checked, findings = 0, []
    for checkpoint in checkpoints:
        checked += 1
        chain = chains.get(checkpoint.tenant, [])
        if (
            len(chain) < checkpoint.length
            or chain[checkpoint.length - 1].entry_hash != checkpoint.head_hash
        ):
            at = chain[min(len(chain), checkpoint.length) - 1].sequence if chain else 0
            findings.append(Finding("checkpoint", at, checkpoint.tenant))
    findings.extend(_time_findings(checkpoints))
    return checked, findings


def _time_findings(checkpoints: Iterable[ChainCheckpoint]) -> list[Finding]:
    """A checkpoint dated before one of a shorter length of its tenant's
    (its time went back: audit's clock was set back, and the rule that
    stamps it never earlier than its predecessor was not kept)."""
    findings = []
    by_tenant: dict[str, list[ChainCheckpoint]] = {}
    for checkpoint in checkpoints:
        by_tenant.setdefault(checkpoint.tenant, []).append(checkpoint)
    for tenant, signed in by_tenant.items():
        latest: datetime | None = None
        for checkpoint in sorted(signed, key=lambda c: c.length):
            try:
                when = datetime.fromisoformat(checkpoint.time)
            except ValueError:
                findings.append(Finding("checkpoint_time", checkpoint.length, tenant))
                continue
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            if latest is not None and when < latest:
                findings.append(Finding("checkpoint_time", checkpoint.length, tenant))
            latest = when if latest is None else max(latest, when)
    return findings


def verify_chains(
    rows: Iterable[Any],
    *,
    head_rows: Iterable[HeadRow],
    index: Iterable[Any],
    checkpoints: Iterable[ChainCheckpoint] = (),
    log_heads: Iterable[tuple[str, LogHead]] = (),
    refused: Iterable[str] = (),
    missing: Iterable[tuple[str, int]] = (),
    gaps_are_deletions: bool,
) -> LedgerReport:
    """Verify every chain, every column, the job index and the checkpoints.

    ``rows`` are the ledger's entries in sequence order; ``head_rows`` were
    read before them (an append after that read only lengthens a chain past
    its head row, which is allowed); ``index`` is read after them.
    ``checkpoints`` are the signed chain heads and ``log_heads`` the signed
    log heads that verified; ``refused`` names the checkpoint files that did
    not, ``missing`` the (tenant, length) of those gone."""
    heads = list(head_rows)
    chains: dict[str, list[_Entry]] = {}
    trees: dict[str, MerkleTree] = {}
    findings: list[Finding] = [Finding("checkpoint_file", 0, "", column=name) for name in refused]
    findings += [Finding("checkpoint_missing", length, tenant) for tenant, length in missing]
    views: dict[str, JobFacts] = {}
    last: dict[str, int] = {}
    previous_sequence = 0
    count = 0
    for row in rows:
        count += 1
        sequence, tenant = row.sequence, _text(row.tenant)
        if gaps_are_deletions and previous_sequence and sequence != previous_sequence + 1:
            findings.append(Finding("deleted", previous_sequence + 1, tenant))
        previous_sequence = sequence
        data = _blob(row.event)
        if _recomputed(row.prev_hash, data) != row.entry_hash:
            findings.append(Finding("edited", sequence, tenant))
        findings.extend(_columns(row, views, last))
        trees.setdefault(tenant, MerkleTree()).append(leaf_hash(data or b""))
        chains.setdefault(tenant, []).append(_Entry(sequence, row.prev_hash, row.entry_hash))
    for tenant, chain in chains.items():
        findings.extend(_links(tenant, chain))
    findings.extend(_head_row_findings(chains, heads))
    findings.extend(_view_findings(index, views, last))
    findings.extend(_log_head_findings(trees, log_heads))
    checked, found = _checkpoint_findings(chains, checkpoints)
    findings.extend(found)
    unique = sorted(set(findings), key=lambda f: (f.sequence, f.kind, f.column, f.job))
    return LedgerReport(count, len(chains), checked, unique)
