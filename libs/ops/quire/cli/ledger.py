"""``quire audit verify`` and ``quire evidence``: the ledger, checked and exported."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from quire.cli.args import bearer_metadata, job_resource, operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output, message_dict

__all__ = ["audit_key", "audit_verify", "evidence_export", "evidence_verify", "witness_key"]

EXPORT_TIMEOUT_SECONDS = 120.0


async def audit_verify(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
    from quire.tls import aio_channel

    async with aio_channel(config.audit, config.tls) as channel:
        report = await audit_service_pb2_grpc.AuditServiceStub(channel).VerifyLedger(
            audit_service_pb2.VerifyLedgerRequest(),
            metadata=operator_metadata(config),
            timeout=600,
        )
    out.line(
        f"entries: {report.entries}  chains: {report.chains}  "
        f"checkpoints checked: {report.checkpoints_checked}"
    )
    for finding in report.findings:
        what = f" {finding.column}" if finding.column else ""
        which = f" of {finding.job}" if finding.job else ""
        out.line(
            f"{finding.kind}{what}{which} at sequence {finding.sequence} (tenant {finding.tenant})"
        )
    out.line("OK" if report.ok else "LEDGER DOES NOT VERIFY")
    out.result({**message_dict(report), "ok": report.ok})
    return ExitCode.OK if report.ok else ExitCode.FAILED


async def audit_key(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    """Audit's checkpoint public key, to verify evidence against."""
    from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
    from quire.tls import aio_channel

    async with aio_channel(config.audit, config.tls) as channel:
        key = await audit_service_pb2_grpc.AuditServiceStub(channel).GetCheckpointKey(
            audit_service_pb2.GetCheckpointKeyRequest(), metadata=operator_metadata(config)
        )
    out.line(key.public_key_pem.rstrip("\n"))
    out.line(f"sha256 {key.public_key_sha256}")
    out.result(message_dict(key))
    return ExitCode.OK


async def witness_key(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    """The witness's verifier key: evidence must carry its cosignature."""
    from quire.tls import aio_channel
    from quire.witness.v1 import witness_service_pb2, witness_service_pb2_grpc

    async with aio_channel(config.signer, config.tls) as channel:
        key = await witness_service_pb2_grpc.WitnessServiceStub(channel).GetWitnessKey(
            witness_service_pb2.GetWitnessKeyRequest(), metadata=operator_metadata(config)
        )
    out.line(key.verifier_key)
    out.result(message_dict(key))
    return ExitCode.OK


def _earlier_note(path: str) -> bytes:
    """A checkpoint seen earlier: an evidence file's, or a signed note as it is."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        raise CliError(f"no such file: {path}") from None
    try:
        document = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return data
    if isinstance(document, dict) and isinstance(document.get("checkpoint"), str):
        return str(document["checkpoint"]).encode()
    raise CliError(f"{path} is neither an evidence file nor a checkpoint note")


def _size_of(note: bytes) -> int:
    from quire.checkpoint import Checkpoint
    from quire.signednote import NoteError, parse_note

    try:
        return Checkpoint.parse(parse_note(note).text).size
    except NoteError as error:
        raise CliError(f"not a checkpoint: {error}") from None


async def evidence_export(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    """``quire evidence export JOB``: through audit with an operator token,
    through admission with a tenant's own (``_asked_of``)."""
    output = args.output or f"{job_resource(args.job).removeprefix('jobs/')}.evidence.json"
    since = _size_of(_earlier_note(args.earlier)) if args.earlier else 0
    source = _asked_of(args, config)
    if source == "admission":
        job, document = await _from_admission(config, job_resource(args.job), since)
    else:
        job, document = await _from_audit(config, job_resource(args.job), since)
    Path(output).write_text(document)
    out.line(f"{output}  evidence for {job}")
    out.result({"job": job, "output": output, "via": source})
    return ExitCode.OK


def _asked_of(args: argparse.Namespace, config: ClientConfig) -> str:
    """``audit`` when an operator token is known (any tenant's job) and
    ``--as-tenant`` is not given; else ``admission``, with the tenant's token."""
    if args.as_tenant:
        if not config.token:
            raise CliError("--as-tenant: no tenant token; set QUIRE_TOKEN")
        return "admission"
    if config.operator_token:
        if config.audit:
            return "audit"
        if not config.token:
            raise CliError("an operator's export asks audit: set QUIRE_AUDIT_ADDR")
    if config.token:
        return "admission"
    raise CliError("no token: set QUIRE_TOKEN (your own jobs) or QUIRE_OPERATOR_TOKEN (any job)")


async def _from_audit(config: ClientConfig, job: str, since: int) -> tuple[str, str]:
    from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
    from quire.tls import aio_channel

    async with aio_channel(config.audit, config.tls) as channel:
        evidence = await audit_service_pb2_grpc.AuditServiceStub(channel).ExportEvidence(
            audit_service_pb2.ExportEvidenceRequest(job=job, since_size=since),
            metadata=operator_metadata(config),
            timeout=EXPORT_TIMEOUT_SECONDS,
        )
    return evidence.job, evidence.json


async def _from_admission(config: ClientConfig, job: str, since: int) -> tuple[str, str]:
    from quire.admission.v1 import admission_service_pb2, admission_service_pb2_grpc
    from quire.tls import aio_channel

    async with aio_channel(config.admission, config.tls) as channel:
        evidence = await admission_service_pb2_grpc.AdmissionServiceStub(channel).GetJobEvidence(
            admission_service_pb2.GetJobEvidenceRequest(name=job, since_size=since),
            metadata=bearer_metadata(config.token),
            timeout=EXPORT_TIMEOUT_SECONDS,
        )
    return evidence.job, evidence.json


def _read_evidence(path: str) -> dict[str, Any]:
    if not Path(path).is_file():
        raise CliError(f"no such file: {path}")
    try:
        document = json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise CliError(f"{path} is not JSON: line {error.lineno}: {error.msg}") from None
    if not isinstance(document, dict) or "public_key" not in document:
        raise CliError(f"{path} is not an evidence file (`quire evidence export JOB` writes one)")
    return document


def _entry_line(entry: dict[str, Any]) -> str:
    """``#3 2026-…Z SIGNING  actor attempt 2`` and, when the entry has them,
    the signer identity, signature level, key version and the operator's note
    (all read from the proven bytes, ``quire.evidenceverify.summaries``)."""
    parts = [
        f"#{entry['index']}",
        entry.get("occur_time") or "-",
        entry["to_state"],
        entry["reason_code"],
        entry["actor"],
        f"attempt {entry['attempt']}",
    ]
    if entry.get("signer_identity"):
        parts.append(f"signer={json.dumps(entry['signer_identity'])}")
    if entry.get("signature_level"):
        parts.append(f"level={entry['signature_level']}")
    if entry.get("key_version"):
        parts.append(f"key={entry['key_version']}")
    if entry.get("note"):
        parts.append(f"note={json.dumps(entry['note'])}")
    return " ".join(part for part in parts if part)


def _trusted_key(args: argparse.Namespace) -> str:
    """The pin of the checkpoint key to trust, from outside the evidence file."""
    from quire.evidenceverify import public_key_fingerprint

    if args.key_file:
        try:
            return public_key_fingerprint(Path(args.key_file).read_text())
        except (OSError, ValueError, TypeError):
            raise CliError(f"{args.key_file} is not a PEM public key") from None
    if args.key_sha256:
        return str(args.key_sha256).strip().lower()
    raise CliError(
        "a trusted checkpoint key is required: --key-sha256 PIN or --key-file KEY.pem "
        "(`quire audit key` prints both); the file's own key vouches for nothing"
    )


def _witness_key(args: argparse.Namespace) -> str:
    """The witness's verifier key, from outside the evidence file."""
    if args.witness_key_file:
        try:
            return Path(args.witness_key_file).read_text().strip()
        except OSError:
            raise CliError(f"no such file: {args.witness_key_file}") from None
    if args.witness_key:
        return str(args.witness_key).strip()
    raise CliError(
        "the witness's key is required: --witness-key KEY or --witness-key-file FILE"
        " (`quire witness key` prints it); a checkpoint only audit signed can be rewritten"
    )


def evidence_verify(args: argparse.Namespace, out: Output) -> int:
    from quire.evidenceverify import (
        public_key_fingerprint,
        repeated_names,
        retirements,
        summaries,
        verify_evidence,
    )

    if not args.file:
        raise CliError("`quire evidence verify FILE`: give the evidence file")
    document = _read_evidence(args.file)
    trusted = _trusted_key(args)
    witness = _witness_key(args)
    earlier = _earlier_note(args.earlier) if args.earlier else None
    repeated = repeated_names(Path(args.file).read_text())
    problems = [f"a member name appears twice: {name}" for name in sorted(set(repeated))]
    problems += verify_evidence(
        document, trusted, tenant=args.tenant or None, witness=witness, earlier=earlier
    )
    entries = document.get("entries", [])
    proof = max((len(e.get("inclusion_proof", [])) for e in entries), default=0)
    key = public_key_fingerprint(document["public_key"])
    out.line(
        f"job {document.get('job')}: {len(entries)} entries in "
        f"{document.get('origin')}, inclusion proofs of up to {proof} hashes"
    )
    out.line(f"checkpoint key sha256 {key}")
    for problem in problems:
        out.line(f"problem: {problem}")
    result: dict[str, Any] = {
        "job": document.get("job"),
        "entries": len(entries),
        "origin": document.get("origin"),
        "checkpoint_key_sha256": key,
        "problems": list(problems),
        "ok": not problems,
    }
    if not problems:  # shown only once proven
        proven = list(summaries(document))
        retired = list(retirements(document))
        for entry in proven:
            out.line(f"  {_entry_line(entry)}")
        for item in retired:
            out.line(
                f"  bytes retired under the retention policy: {item['kind']} "
                f"sha256={item['sha256']} size={item['size_bytes']} "
                f"rule={item['rule']} period={item['period_seconds']}s "
                f"since={item['since']} at={item['retired_at']}"
            )
        result.update({"transitions": proven, "retirements": retired})
    out.line("OK" if not problems else "EVIDENCE DOES NOT VERIFY")
    out.result(result)
    return ExitCode.OK if not problems else ExitCode.FAILED
