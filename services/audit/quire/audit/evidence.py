"""Evidence export: one JSON document that proves a job's history offline, in
the format written down in ``docs/evidence-format.md``.

It holds the job's ledger entries (their hashed event bytes: ids, digests and
versions, never document text), each with an RFC 9162 inclusion proof against
a signed checkpoint of the tenant's log, and a consistency proof from the
first checkpoint that covered the job to the one used. Its size grows with
the job's entries times log2 of the tenant's history, not with the history.
``verify_evidence`` needs nothing but the document (and, to pin it, the
checkpoint key's fingerprint).

Each entry also shows what a reader needs without decoding protobuf: when it
occurred, the delivery attempt that recorded it, the operator's note and the
signer identity, signature level and key version (``SHOWN``). They are read
from the entry's hashed bytes when exported, never from a side column, and
the verifier checks each against the bytes it proves, so an edited value is
refused like an edited entry.

A job whose bytes were deleted under the retention policy still has every
entry, plus one retirement entry per blob deleted (``retirements`` reads
them back from the proven bytes), so its evidence verifies and says what
was retired, when and under which rule.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf.message import DecodeError, Message
from google.protobuf.timestamp_pb2 import Timestamp
from google.protobuf.unknown_fields import UnknownFieldSet
from sqlalchemy import Connection, select

from quire.audit import tables
from quire.audit.tenantlog import DAMAGED, origin, tenant_entries, tenant_of, tenant_tree
from quire.checkpoint import open_checkpoint
from quire.cosignature import parse_witness_key, verify_cosignature
from quire.errors import DataLoss, FailedPrecondition, NotFound
from quire.jobs import HISTORY_BEFORE_COMPLETION, TERMINAL_STATES, state_name
from quire.merkle import ProofError, leaf_hash, verify_consistency, verify_inclusion
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.signednote import NoteError
from quire.type import queue_pb2

__all__ = [
    "build_evidence",
    "verify_evidence",
    "public_key_fingerprint",
    "summaries",
    "retirements",
    "shown_fields",
    "FORMAT",
    "NO_ENTRIES",
    "SHOWN",
]

FORMAT = "quire-evidence/1"
NO_ENTRIES = "no ledger entries for this job"
RETIRED = ReasonCode.BYTES_RETIRED.value
"""The reason code every retirement entry carries beside its ``retirement`` field."""

SHOWN = (
    "occur_time",
    "attempt",
    "note",
    "signer_identity",
    "signature_level",
    "key_version",
)
"""The fields each exported entry shows beside its bytes (section 6 of the
format), every one read from those bytes; a verifier refuses any that differs."""


def shown_fields(event: queue_pb2.TransitionEvent) -> dict[str, Any]:
    """What an entry shows beside its bytes, read from the decoded bytes:
    ``occur_time`` as RFC 3339 UTC (null when unset), the others as recorded
    ("" or 0 when the entry has none)."""
    occurred = event.occur_time if event.HasField("occur_time") else None
    return {
        "occur_time": occurred.ToJsonString() if occurred is not None else None,
        "attempt": event.attempt,
        "note": event.note,
        "signer_identity": event.signer_identity,
        "signature_level": event.signature_level,
        "key_version": event.key_version,
    }


def _shown_problem(index: int, item: dict[str, Any], event: queue_pb2.TransitionEvent) -> str:
    """Why a shown field of entry ``index`` differs from its bytes; "" when none does.

    A field left out is not checked (a file exported before the fields were
    shown has none); one present must equal the bytes' value exactly, the
    time as an instant (any RFC 3339 spelling of it)."""
    expected = shown_fields(event)
    for name in SHOWN:
        if name not in item:
            continue
        value = item[name]
        if name == "occur_time":
            if value is None or expected[name] is None:
                same = value is None and expected[name] is None
            else:
                same = isinstance(value, str) and _same_instant(value, event.occur_time)
        elif name == "attempt":
            same = type(value) is int and value == expected[name]
        else:
            same = isinstance(value, str) and value == expected[name]
        if not same:
            return f"entry {index}: {name} is not what its bytes say"
    return ""


def _same_instant(text: str, stamp: Any) -> bool:
    parsed = Timestamp()
    try:
        parsed.FromJsonString(text)
    except ValueError:
        return False
    return (parsed.seconds, parsed.nanos) == (stamp.seconds, stamp.nanos)


def public_key_fingerprint(pem: str) -> str:
    key = serialization.load_pem_public_key(pem.encode())
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _decoded(data: bytes) -> queue_pb2.TransitionEvent:
    """An entry's event; DATA_LOSS (LEDGER_DAMAGED) when its bytes are not one."""
    try:
        event = queue_pb2.TransitionEvent.FromString(data)
        shown_fields(event)
    except (DecodeError, ValueError):
        raise DataLoss(ReasonCode.LEDGER_DAMAGED, DAMAGED) from None
    return event


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


def _key(document: dict[str, Any], trusted_key_sha256: str | None) -> Ed25519PublicKey:
    """The checkpoint key, once it is the one trusted from outside the file: a
    file's own key vouches for nothing (anyone can sign a log they made up)."""
    if not trusted_key_sha256:
        raise NoteError("no trusted checkpoint key: the file cannot vouch for itself")
    pem = document["public_key"]
    if public_key_fingerprint(pem) != trusted_key_sha256:
        raise NoteError("checkpoint key is not the trusted one")
    key = serialization.load_pem_public_key(pem.encode())
    if not isinstance(key, Ed25519PublicKey):
        raise NoteError("checkpoint key is not Ed25519")
    return key


def verify_evidence(
    document: dict[str, Any],
    trusted_key_sha256: str | None,
    *,
    tenant: str | None = None,
    witness: str | None = None,
    earlier: bytes | None = None,
) -> list[str]:
    """Problems found (``docs/evidence-format.md`` section 7); empty when it
    holds. ``trusted_key_sha256`` is the pin of audit's checkpoint key, from
    outside the file (``GetCheckpointKey``); ``tenant``, when given, is the
    tenant whose log the evidence must come from; ``witness``, the witness's
    verifier key (``GetWitnessKey``), whose cosignature the checkpoint must
    carry; ``earlier``, a checkpoint of the same log the verifier saw before,
    which the evidence's checkpoint must extend."""
    if tenant is not None and document.get("origin") != origin(tenant):
        return ["the evidence is from another tenant's log"]
    try:
        events = _proven_events(document, trusted_key_sha256)
        if witness is not None:
            verify_cosignature(document["checkpoint"].encode(), *parse_witness_key(witness))
        if earlier is not None:
            _extends_earlier(document, trusted_key_sha256, earlier)
    except (NoteError, ProofError, KeyError, ValueError, binascii.Error) as error:
        return [str(error) or type(error).__name__]
    return _shown_problems(document, events) + _history_problems(document, events)


def _extends_earlier(
    document: dict[str, Any], trusted_key_sha256: str | None, earlier: bytes
) -> None:
    """Step 5 with a checkpoint kept from before: the evidence's checkpoint is
    that one, or carries a verified consistency proof from it (``consistency``
    elements were checked against the checkpoint in ``_proven_events``)."""
    key, log_origin = _key(document, trusted_key_sha256), document["origin"]
    seen = open_checkpoint(earlier, log_origin, key)
    head = open_checkpoint(document["checkpoint"].encode(), log_origin, key)
    if seen.size > head.size:
        raise ProofError("the evidence's checkpoint is older than the one seen earlier")
    if seen.size == head.size:
        if seen.root_hash != head.root_hash:
            raise ProofError("the log was rewritten: same size, another root than seen earlier")
        return
    for item in document.get("consistency", []):
        old = open_checkpoint(item["checkpoint"].encode(), log_origin, key)
        if old.size == seen.size:
            if old.root_hash != seen.root_hash:
                raise ProofError("the log was rewritten since the checkpoint seen earlier")
            return
    raise ProofError(
        "no proof that the evidence extends the checkpoint seen earlier"
        " (export it with --since that checkpoint)"
    )


def _shown_problems(document: dict[str, Any], events: list[queue_pb2.TransitionEvent]) -> list[str]:
    """Step 6: each field an entry shows beside its bytes is what the bytes say."""
    problems = []
    for item, event in zip(document["entries"], events, strict=True):
        problem = _shown_problem(int(item["index"]), item, event)
        if problem:
            problems.append(problem)
    return problems


def _proven_events(
    document: dict[str, Any], trusted_key_sha256: str | None
) -> list[queue_pb2.TransitionEvent]:
    """Steps 1-5: the entries proven to be in the signed log, decoded."""
    if document.get("format") != FORMAT:
        raise NoteError("not quire evidence in this format")
    log_origin = document["origin"]
    key = _key(document, trusted_key_sha256)
    head = open_checkpoint(document["checkpoint"].encode(), log_origin, key)
    events = []
    previous = -1
    for item in document["entries"]:
        index, data = item["index"], _unb64(item["entry"])
        if type(index) is not int:  # not a string, not a boolean
            raise ProofError("an entry's index is not a JSON integer")
        if index <= previous:
            raise ProofError("entry indices are not increasing")
        previous = index
        proof = [_unb64(h) for h in item["inclusion_proof"]]
        verify_inclusion(leaf_hash(data), index, head.size, proof, head.root_hash)
        try:
            event = queue_pb2.TransitionEvent.FromString(data)
        except DecodeError:
            raise ProofError(f"entry {index} is not a transition event") from None
        if _has_unknown_fields(event) or event.SerializeToString(deterministic=True) != data:
            # A wrong wire type, an unknown, repeated or misplaced field: readers differ on those.
            raise ProofError(f"entry {index} is not canonically encoded")
        events.append(event)
    for item in document.get("consistency", []):
        old = open_checkpoint(item["checkpoint"].encode(), log_origin, key)
        proof = [_unb64(h) for h in item["proof"]]
        verify_consistency(old.size, head.size, old.root_hash, head.root_hash, proof)
    return events


def _history_problems(
    document: dict[str, Any], events: list[queue_pb2.TransitionEvent]
) -> list[str]:
    """Step 6: every entry is this job's, in its tenant's log, and the history is whole."""
    problems = []
    tenant = tenant_of(document["origin"])
    if any(event.job != document["job"] or event.tenant != tenant for event in events):
        problems.append("an entry belongs to another job or tenant")
    states = {state_name(event.to_state) for event in events}
    states_ended = {
        state_name(event.to_state)
        for event in events
        if not event.HasField("retirement") and state_name(event.to_state) in TERMINAL_STATES
    }
    if State.ACCEPTED not in states:
        problems.append("the history does not start with ACCEPTED")
    if State.COMPLETED in states and not set(HISTORY_BEFORE_COMPLETION) <= states:
        problems.append("a completion without the whole history before it")
    if any(event.HasField("retirement") != (event.reason_code == RETIRED) for event in events):
        problems.append("a retirement marked by only one of its two signs")
    if any(
        event.HasField("retirement")
        and (event.from_state != event.to_state or state_name(event.to_state) not in states_ended)
        for event in events
    ):
        problems.append("bytes retired from a job that had not ended, or with a state change")
    return problems


def summaries(document: dict[str, Any]) -> list[dict[str, Any]]:
    """What each entry says, read from its bytes (for printing after verifying)."""
    out = []
    for item in document["entries"]:
        event = queue_pb2.TransitionEvent.FromString(_unb64(item["entry"]))
        out.append(
            {
                "index": item["index"],
                "to_state": state_name(event.to_state),
                "reason_code": event.reason_code,
                "actor": f"{event.actor.service}/{event.actor.instance}",
                "output_digest": event.output_digest,
                **shown_fields(event),
            }
        )
    return out


def retirements(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The bytes retired under the retention policy, read from the entries'
    bytes (for printing after verifying): kind, digest, size, rule, period,
    and since when the period ran."""
    out = []
    for item in document["entries"]:
        event = queue_pb2.TransitionEvent.FromString(_unb64(item["entry"]))
        if not event.HasField("retirement"):
            continue
        retired = event.retirement
        out.append(
            {
                "index": item["index"],
                "kind": retired.kind,
                "sha256": retired.sha256,
                "size_bytes": retired.size_bytes,
                "rule": retired.rule,
                "period_seconds": retired.period_seconds,
                "since": retired.period_start_time.ToDatetime().isoformat() + "Z",
                "retired_at": event.occur_time.ToDatetime().isoformat() + "Z",
            }
        )
    return out


def _has_unknown_fields(message: Message) -> bool:
    """Whether decoding met a field number or wire type the schema does not have."""
    if len(UnknownFieldSet(message)):
        return True
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        values = value if field.is_repeated else [value]
        if any(_has_unknown_fields(v) for v in values):
            return True
    return False


def repeated_names(text: str) -> list[str]:
    """Member names that appear twice in one JSON object of ``text`` (JSON
    parsers differ on which copy wins, so evidence with any is refused)."""
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for name, _value in items:
            if name in seen:
                repeated.append(name)
            seen.add(name)
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)
    return repeated


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True)
