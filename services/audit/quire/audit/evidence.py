"""Evidence export: one JSON document that proves a job's history offline, in
the format written down in ``docs/evidence-format.md``.

It holds the job's ledger entries (their hashed event bytes: ids, digests and
versions, never document text), each with an RFC 9162 inclusion proof against
a signed checkpoint of the tenant's log, and a consistency proof from the
first checkpoint that covered the job to the one used. Its size grows with
the job's entries times log2 of the tenant's history, not with the history.
The verifier (``quire.evidenceverify``, behind ``quire evidence verify``)
needs nothing but the document (and, to pin it, the checkpoint key's
fingerprint).

Each entry also shows what a reader needs without decoding protobuf: when it
occurred, the delivery attempt that recorded it, the operator's note and the
signer identity, signature level and key version
(``quire.evidenceverify.SHOWN``). They are read
from the entry's hashed bytes when exported, never from a side column, and
the verifier checks each against the bytes it proves, so an edited value is
refused like an edited entry.

A job whose bytes were deleted under the retention policy still has every
entry, plus one retirement entry per blob deleted (the verifier's
``retirements`` reads them back from the proven bytes), so its evidence
verifies and says what was retired, when and under which rule.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf.message import DecodeError
from sqlalchemy import Connection, select

from quire.audit import tables
from quire.audit.tenantlog import DAMAGED, origin, tenant_entries, tenant_tree
from quire.errors import DataLoss, FailedPrecondition, NotFound
from quire.evidenceverify import FORMAT, public_key_fingerprint, shown_fields
from quire.reasons import ReasonCode
from quire.type import queue_pb2

__all__ = ["build_evidence", "dumps", "job_owner", "NO_ENTRIES"]

NO_ENTRIES = "no ledger entries for this job"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _decoded(data: bytes) -> queue_pb2.TransitionEvent:
    """An entry's event; DATA_LOSS (LEDGER_DAMAGED) when its bytes are not one."""
    try:
        event = queue_pb2.TransitionEvent.FromString(data)
        shown_fields(event)
    except (DecodeError, ValueError):
        raise DataLoss(ReasonCode.LEDGER_DAMAGED, DAMAGED) from None
    return event


def job_owner(connection: Connection, job: str) -> str:
    """The tenant whose log holds ``job``'s first entry; NOT_FOUND if none does."""
    table = tables.ledger
    row = connection.execute(
        select(table.c.tenant).where(table.c.job == job).order_by(table.c.sequence).limit(1)
    ).first()
    if row is None:
        raise NotFound(NO_ENTRIES)
    return str(row.tenant)


def build_evidence(
    connection: Connection,
    job: str,
    checkpoints: list[dict[str, Any]],
    public_pem: str,
    *,
    since_size: int = 0,
    tenant: str | None = None,
) -> dict[str, Any]:
    """The job's evidence against the latest checkpoint of its tenant's log
    the witness cosigned (the latest one, when none is cosigned yet), with a
    consistency proof from the first checkpoint that covered the job and,
    when ``since_size`` is given, from the checkpoint of that size.

    With ``tenant`` (an export on a tenant's behalf), NOT_FOUND unless every
    entry of the job is that tenant's, by its ledger row and by its hashed
    bytes: the same answer as for a job audit never recorded."""
    table = tables.ledger
    mine = connection.execute(
        select(table.c.sequence, table.c.tenant)
        .where(table.c.job == job)
        .order_by(table.c.sequence)
    ).all()
    if not mine or (tenant is not None and any(row.tenant != tenant for row in mine)):
        raise NotFound(NO_ENTRIES)
    owner = mine[0].tenant
    entries = tenant_entries(connection, owner)
    index_of = {sequence: index for index, (sequence, _) in enumerate(entries)}
    if any(row.sequence not in index_of for row in mine):
        raise DataLoss(ReasonCode.LEDGER_DAMAGED, DAMAGED)  # an entry of the job left its chain
    indices = [index_of[row.sequence] for row in mine]
    events = {index: _decoded(entries[index][1]) for index in indices}
    if tenant is not None and any(event.tenant != tenant for event in events.values()):
        raise NotFound(NO_ENTRIES)
    return _document(job, owner, entries, indices, events, checkpoints, public_pem, since_size)


def _document(
    job: str,
    tenant: str,
    entries: list[tuple[int, bytes]],
    indices: list[int],
    events: dict[int, queue_pb2.TransitionEvent],
    checkpoints: list[dict[str, Any]],
    public_pem: str,
    since_size: int,
) -> dict[str, Any]:
    """The evidence document of ``job``'s entries (leaves ``indices`` of
    ``tenant``'s log) against the checkpoint ``build_evidence`` describes."""
    covering = sorted(
        (c for c in checkpoints if c.get("note") and c["checkpoint"]["tenant"] == tenant),
        key=lambda c: c["checkpoint"]["length"],
    )
    of_tenant = covering
    covering = [c for c in covering if c["checkpoint"]["length"] > indices[-1]]
    if not covering:
        raise NotFound("no checkpoint covers this job yet")
    # The newest the witness cosigned, no older than the checkpoint the caller saw.
    pool = [c for c in covering if c["checkpoint"]["length"] >= since_size] or covering
    witnessed = [c for c in pool if c.get("witnessed")]
    first, latest = covering[0], (witnessed or pool)[-1]
    size = latest["checkpoint"]["length"]
    tree = tenant_tree(entries[:size])
    earlier = [first] if first["checkpoint"]["length"] < size else []
    if since_size:
        if since_size > size:
            raise FailedPrecondition(
                ReasonCode.CHECKPOINT_INCONSISTENT,
                "the tenant's log is smaller than the checkpoint given",
            )
        seen = [c for c in of_tenant if c["checkpoint"]["length"] == since_size]
        if not seen:
            raise NotFound("no checkpoint of that size")
        if since_size < size and seen[0] is not first:
            earlier.append(seen[0])
    consistency = [
        {
            "checkpoint": old["note"],
            "proof": [_b64(h) for h in tree.consistency_proof(old["checkpoint"]["length"], size)],
        }
        for old in earlier
    ]
    return {
        "format": FORMAT,
        "origin": origin(tenant),
        "job": job,
        "checkpoint": latest["note"],
        "entries": [
            {
                "index": index,
                "entry": _b64(entries[index][1]),
                "inclusion_proof": [_b64(h) for h in tree.inclusion_proof(index, size)],
                # Read from the hashed bytes just encoded, never from a column.
                **shown_fields(events[index]),
            }
            for index in indices
        ],
        "consistency": consistency,
        "public_key": public_pem,
        "public_key_sha256": public_key_fingerprint(public_pem),
    }


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True)
