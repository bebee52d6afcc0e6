"""Issue 21: an exported evidence document shows, per entry, when it
occurred, the delivery attempt that recorded it, the operator's note and the
signer identity (with the signature level and key version), every value read
from the entry's hashed bytes; the offline verifier refuses a document in
which one of them was edited.

Unit tests over a real SQLite audit database, and one job on the session's stack
that an operator approves through review with a note."""

from __future__ import annotations

import asyncio
import copy
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from quire.audit import ledger, tables
from quire.audit.checkpoints import CheckpointSigner
from quire.audit.evidence import build_evidence
from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.client import AdmissionClient, PacketItem
from quire.database import Database
from quire.evidenceverify import SHOWN, public_key_fingerprint, summaries, verify_evidence
from quire.jobs import state_name
from quire.stack.supervisor import StackInfo
from quire.testing.operatorcalls import AsOperator
from quire.testing.pdfs import write_form_pdf
from quire.testing.quirecli import run_quire
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc
from quire.witness.v1 import witness_service_pb2 as wpb
from quire.witness.v1 import witness_service_pb2_grpc as wgrpc

FACTORY = EventFactory("test", "instance", "0")
NOTE = "landlord signs on paper"
IDENTITY = "CN=Quire Test Signer,O=Quire"


# -- unit: a hand-made history in a real audit database --------------------------


def _history() -> list[queue_pb2.TransitionEvent]:
    task = queue_pb2.JobTask(job="jobs/aa", tenant="t1")
    steps = [
        ("", "ACCEPTED", 1, {}),
        ("ACCEPTED", "VALIDATING", 1, {}),
        ("VALIDATING", "REVIEWING", 2, {}),
        ("REVIEWING", "NEEDS_REVIEW", 2, {}),
        ("NEEDS_REVIEW", "ASSEMBLING", 1, {"note": NOTE}),
        ("ASSEMBLING", "SIGNING", 3, {}),
        ("SIGNING", "COMMITTING", 1, {"key_version": "v2"}),
        (
            "COMMITTING",
            "COMPLETED",
            1,
            {"key_version": "v2", "signer_identity": IDENTITY, "signature_level": "B-B"},
        ),
    ]
    return [
        FACTORY.transition(task, before, after, attempt=attempt, lease_token=1, **fields)
        for before, after, attempt, fields in steps
    ]


@pytest.fixture
def exported(tmp_path: Path) -> tuple[dict[str, Any], str, list[queue_pb2.TransitionEvent]]:
    """The job's evidence, the trusted key's fingerprint, and the events recorded."""
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    events = _history()
    for event in events:
        database.transaction(lambda s, e=event: ledger.append(s, e))
    signer = CheckpointSigner(tmp_path / "keys")
    documents = database.transaction(signer.take)
    evidence = database.transaction(
        lambda s: build_evidence(s, "jobs/aa", documents, signer.public_pem)
    )
    database.close()
    return evidence, public_key_fingerprint(signer.public_pem), events


def test_each_entry_shows_its_time_attempt_note_and_signer(
    exported: tuple[dict[str, Any], str, list[queue_pb2.TransitionEvent]],
) -> None:
    evidence, trusted, events = exported
    assert verify_evidence(evidence, trusted) == []
    entries = evidence["entries"]
    assert len(entries) == len(events)
    for item, event in zip(entries, events, strict=True):
        assert item["occur_time"] == event.occur_time.ToJsonString()
        assert item["attempt"] == event.attempt
        assert item["note"] == event.note
        assert item["signer_identity"] == event.signer_identity
        assert item["signature_level"] == event.signature_level
        assert item["key_version"] == event.key_version
    assert [e["attempt"] for e in entries] == [1, 1, 2, 2, 1, 3, 1, 1]
    assert entries[4]["note"] == NOTE
    assert entries[-1]["signer_identity"] == IDENTITY
    assert entries[-1]["signature_level"] == "B-B"
    # What a report prints after verifying is read from the bytes as well.
    proven = summaries(evidence)
    assert [p["note"] for p in proven] == [e.note for e in events]
    assert proven[-1]["signer_identity"] == IDENTITY


def _edited(evidence: dict[str, Any], index: int, key: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(evidence)
    changed["entries"][index][key] = value
    return changed


@pytest.mark.parametrize(
    ("index", "key", "value"),
    [
        (4, "note", "approved without reading"),
        (4, "note", ""),
        (0, "note", "an invented note"),
        (7, "signer_identity", "CN=Someone Else"),
        (7, "signer_identity", ""),
        (7, "signature_level", "B-T"),
        (7, "key_version", "v1"),
        (5, "attempt", 1),
        (5, "attempt", "3"),
        (5, "attempt", True),
        (1, "occur_time", "2001-01-01T00:00:00Z"),
        (1, "occur_time", None),
        (1, "occur_time", "not a time"),
    ],
)
def test_an_edited_shown_field_does_not_verify(
    exported: tuple[dict[str, Any], str, list[queue_pb2.TransitionEvent]],
    index: int,
    key: str,
    value: Any,
) -> None:
    evidence, trusted, _events = exported
    problems = verify_evidence(_edited(evidence, index, key, value), trusted)
    assert problems, f"an edited {key} verified"
    assert any(key in problem for problem in problems)
    assert not any(str(value) in problem for problem in problems if value), "no values echoed"


def test_an_edited_time_by_a_nanosecond_does_not_verify(
    exported: tuple[dict[str, Any], str, list[queue_pb2.TransitionEvent]],
) -> None:
    evidence, trusted, events = exported
    stamp = queue_pb2.TransitionEvent()
    stamp.occur_time.CopyFrom(events[2].occur_time)
    stamp.occur_time.nanos = (stamp.occur_time.nanos + 1) % 1_000_000_000
    changed = _edited(evidence, 2, "occur_time", stamp.occur_time.ToJsonString())
    assert verify_evidence(changed, trusted)


def test_the_same_instant_spelled_otherwise_and_older_files_verify(
    exported: tuple[dict[str, Any], str, list[queue_pb2.TransitionEvent]],
) -> None:
    evidence, trusted, events = exported
    seconds = events[0].occur_time.seconds
    whole = queue_pb2.TransitionEvent()
    whole.occur_time.seconds = seconds
    respelled = copy.deepcopy(evidence)
    # Nanoseconds written out in full: the same instant, another spelling.
    nanos = events[0].occur_time.nanos
    text = whole.occur_time.ToJsonString().removesuffix("Z") + f".{nanos:09d}Z"
    respelled["entries"][0]["occur_time"] = text
    assert verify_evidence(respelled, trusted) == []
    older = copy.deepcopy(evidence)
    for item in older["entries"]:
        for key in SHOWN:
            del item[key]
    assert verify_evidence(older, trusted) == [], "a file exported before the fields verifies"


# -- the real stack: a job approved through review with a note -------------------

CLAUSES = (
    "The renewal term is twelve months. Monthly rent: 1,200. Lead-based paint disclosure attached."
)
UNSIGNED = {"property_address": "1 Main St", "tenant_signature": "A. Tenant"}


async def _all_entries(audit: agrpc.AuditServiceStub, job: str, operator: Any) -> list[Any]:
    entries, token = [], ""
    while True:
        reply = await audit.ListJobEvents(
            apb.ListJobEventsRequest(job=job, page_size=100, page_token=token),
            metadata=operator,
            timeout=30,
        )
        entries.extend(reply.entries)
        token = reply.next_page_token
        if not token:
            return entries


@pytest.mark.stack
async def test_a_reviewed_jobs_evidence_shows_what_its_ledger_says(
    stack,  # type: ignore[no-untyped-def]
    tenants,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """On the session's stack, as a fresh tenant: the evidence of one job reads
    only that job's ledger. (The validator's budget no longer counts time spent
    waiting for a CPU, so the default budget parks the lease on a busy machine.)"""
    client = await tenants("evidence")
    await _reviewed_jobs_evidence(StackInfo.read(stack.data_dir), client, tmp_path)


async def _reviewed_jobs_evidence(info: StackInfo, client: AdmissionClient, tmp_path: Path) -> None:
    import json

    path = write_form_pdf(tmp_path / "lease.pdf", [CLAUSES, uuid.uuid4().hex], UNSIGNED)
    digest = (await client.upload(path)).sha256
    job = await client.submit([PacketItem("lease", digest)], ruleset="lease-renewal")
    parked = await client.wait(job.name, timeout=90)
    assert state_name(parked.state) == "NEEDS_REVIEW", parked.reason_code
    operator = AsOperator(info.operator_token())
    async with grpc.aio.insecure_channel(
        info.endpoints["validator"], interceptors=[operator]
    ) as channel:
        await vgrpc.ValidatorServiceStub(channel).ResolveReview(
            vpb.ResolveReviewRequest(job=job.name, approve=True, note=NOTE, operator="ops-alice"),
            timeout=30,
        )
    final = await client.wait(job.name, timeout=90, stop_when_parked=False)
    assert state_name(final.state) == "COMPLETED"

    metadata = (("authorization", f"Bearer {info.operator_token()}"),)
    async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
        audit = agrpc.AuditServiceStub(channel)
        exported = await audit.ExportEvidence(
            apb.ExportEvidenceRequest(job=job.name), metadata=metadata, timeout=60
        )
        recorded = await _all_entries(audit, job.name, metadata)
    async with grpc.aio.insecure_channel(info.endpoints["signer"]) as channel:
        witness = (
            await wgrpc.WitnessServiceStub(channel).GetWitnessKey(
                wpb.GetWitnessKeyRequest(), metadata=metadata, timeout=30
            )
        ).verifier_key
    evidence = json.loads(exported.json)
    trusted = public_key_fingerprint(evidence["public_key"])
    assert verify_evidence(evidence, trusted, witness=witness) == []

    entries = evidence["entries"]
    assert len(entries) == len(recorded)
    for item, entry in zip(entries, recorded, strict=True):
        event = entry.event
        assert item["occur_time"] == event.occur_time.ToJsonString()
        assert item["attempt"] == event.attempt
        assert item["note"] == event.note
        assert item["signer_identity"] == event.signer_identity
        assert item["signature_level"] == event.signature_level
        assert item["key_version"] == event.key_version
    approval = next(
        i for i, e in enumerate(recorded) if state_name(e.event.from_state) == "NEEDS_REVIEW"
    )
    assert entries[approval]["note"] == NOTE
    completed = next(
        i for i, e in enumerate(recorded) if state_name(e.event.to_state) == "COMPLETED"
    )
    assert entries[completed]["signer_identity"] != ""
    assert entries[completed]["signer_identity"] == recorded[completed].event.signer_identity
    assert all(item["attempt"] >= 1 for item in entries)

    edits = [
        (approval, "note", "approved without reading"),
        (completed, "signer_identity", "CN=Someone Else"),
        (completed, "attempt", entries[completed]["attempt"] + 1),
        (0, "occur_time", "2001-01-01T00:00:00Z"),
    ]
    for index, key, value in edits:
        assert verify_evidence(_edited(evidence, index, key, value), trusted), key

    # `quire evidence verify`, offline: the note and signer read from the proven bytes.
    good, bad = tmp_path / "evidence.json", tmp_path / "edited.json"
    good.write_text(json.dumps(evidence))
    bad.write_text(json.dumps(_edited(evidence, approval, "note", "approved without reading")))
    offline = await asyncio.to_thread(
        run_quire,
        tmp_path / "no-stack",
        "evidence",
        "verify",
        str(good),
        "--json",
        "--key-sha256",
        trusted,
        "--witness-key",
        witness,
    )
    assert offline.returncode == 0, offline.stderr
    proven = json.loads(offline.stdout)["transitions"]
    assert proven[approval]["note"] == NOTE
    assert proven[completed]["signer_identity"] == entries[completed]["signer_identity"]
    refused = await asyncio.to_thread(
        run_quire,
        tmp_path / "no-stack",
        "evidence",
        "verify",
        str(bad),
        "--key-sha256",
        trusted,
        "--witness-key",
        witness,
    )
    assert refused.returncode == 1 and "note is not what its bytes say" in refused.stdout
