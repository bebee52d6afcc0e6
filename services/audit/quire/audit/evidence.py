"""Evidence export: one JSON document that proves a job's history offline.

It holds the job's ledger entries and the tenant's chain from the job's first
entry to the nearest signed checkpoint at or after its last entry (every link
with its event bytes, which carry ids, digests and versions, never document
text), plus the signed checkpoint and audit's checkpoint public key.
``verify_evidence`` needs nothing but the document.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf.message import DecodeError
from sqlalchemy import select
from sqlalchemy.orm import Session

from quire.audit import tables
from quire.audit.checkpoints import Checkpoint
from quire.audit.ledger import GENESIS, entry_hash
from quire.errors import NotFound
from quire.jobs import state_name
from quire.type import queue_pb2

__all__ = ["build_evidence", "verify_evidence", "public_key_fingerprint"]

FORMAT = "quire-evidence/1"


def public_key_fingerprint(pem: str) -> str:
    key = serialization.load_pem_public_key(pem.encode())
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def _summary(event: queue_pb2.TransitionEvent) -> dict[str, Any]:
    return {
        "to_state": state_name(event.to_state),
        "from_state": state_name(event.from_state) if event.from_state else "",
        "reason_code": event.reason_code,
        "actor": f"{event.actor.service}/{event.actor.instance}",
        "manifest_digest": event.manifest_digest,
        "source_digests": list(event.source_digests),
        "output_digest": event.output_digest,
        "ruleset_version": event.ruleset_version,
        "ruleset_digest": event.ruleset_digest,
        "key_version": event.key_version,
        "certificate_sha256": event.certificate_sha256,
    }


def build_evidence(
    session: Session, job: str, checkpoints: list[dict[str, Any]], public_pem: str
) -> dict[str, Any]:
    table = tables.ledger
    mine = session.execute(select(table).where(table.c.job == job).order_by(table.c.sequence)).all()
    if not mine:
        raise NotFound("no ledger entries for this job")
    tenant = mine[0].tenant
    chain = session.execute(
        select(table).where(table.c.tenant == tenant).order_by(table.c.sequence)
    ).all()
    positions = {row.sequence: index for index, row in enumerate(chain)}
    first, last = positions[mine[0].sequence], positions[mine[-1].sequence]
    usable = [
        c
        for c in checkpoints
        if c["checkpoint"]["tenant"] == tenant and c["checkpoint"]["length"] > last
    ]
    if not usable:
        raise NotFound("no checkpoint covers this job yet")
    checkpoint = min(usable, key=lambda c: c["checkpoint"]["length"])
    end = checkpoint["checkpoint"]["length"]
    links = [
        {
            "sequence": row.sequence,
            "position": index + 1,
            "prev_hash": row.prev_hash,
            "entry_hash": row.entry_hash,
            "event": base64.b64encode(row.event).decode(),
        }
        for index, row in enumerate(chain[first:end], start=first)
    ]
    return {
        "format": FORMAT,
        "job": job,
        "tenant": tenant,
        "entries": [
            {"sequence": row.sequence, **_summary(queue_pb2.TransitionEvent.FromString(row.event))}
            for row in mine
        ],
        "chain": links,
        "checkpoint": checkpoint,
        "public_key": public_pem,
        "public_key_sha256": public_key_fingerprint(public_pem),
    }


def verify_evidence(document: dict[str, Any], trusted_key_sha256: str | None = None) -> list[str]:
    """Problems found; empty when the evidence holds."""
    problems: list[str] = []
    pem = document["public_key"]
    if trusted_key_sha256 and public_key_fingerprint(pem) != trusted_key_sha256:
        problems.append("checkpoint key is not the trusted one")
    key = serialization.load_pem_public_key(pem.encode())
    signed = document["checkpoint"]
    checkpoint = Checkpoint(**signed["checkpoint"])
    try:
        assert isinstance(key, Ed25519PublicKey)
        key.verify(base64.b64decode(signed["signature"]), checkpoint.payload())
    except Exception:  # noqa: BLE001 - InvalidSignature or a wrong key type
        problems.append("checkpoint signature does not verify")
    links = document["chain"]
    previous = links[0]["prev_hash"] if links else GENESIS
    job_events: dict[int, queue_pb2.TransitionEvent] = {}
    for link in links:
        data = base64.b64decode(link["event"])
        if link["prev_hash"] != previous:
            problems.append(f"chain broken before sequence {link['sequence']}")
        if entry_hash(link["prev_hash"], data) != link["entry_hash"]:
            problems.append(f"entry {link['sequence']} does not match its hash")
        previous = link["entry_hash"]
        try:
            event = queue_pb2.TransitionEvent.FromString(data)
        except DecodeError:
            problems.append(f"entry {link['sequence']} is not a transition event")
            continue
        if event.job == document["job"]:
            job_events[link["sequence"]] = event
    if not links or links[-1]["entry_hash"] != checkpoint.head_hash:
        problems.append("chain does not end at the checkpoint's head")
    if links and links[-1]["position"] != checkpoint.length:
        problems.append("chain length differs from the checkpoint's")
    if checkpoint.tenant != document["tenant"]:
        problems.append("checkpoint is for another tenant")
    claimed = {entry["sequence"]: entry for entry in document["entries"]}
    if set(claimed) != set(job_events):
        problems.append("the listed entries are not the job's entries in the chain")
    for sequence, event in job_events.items():
        entry = dict(claimed.get(sequence, {}))
        entry.pop("sequence", None)
        if entry != _summary(event):
            problems.append(f"entry {sequence} summary differs from the signed chain")
    return problems


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True)
