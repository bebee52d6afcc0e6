"""The ``quire`` command: run the stack, send packets, follow jobs, check signatures.

quire up [--data-dir DIR] [--example DIR]
quire submit FILE... | --manifest M.json [--wait]
quire status JOB
quire wait JOB [--timeout S]
quire fetch JOB -o OUT.pdf
quire verify OUT.pdf
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from pathlib import Path

import grpc

from quire.cli import check, deadletters, keys, operators, provision, reviews
from quire.cli import retention as retention_commands
from quire.cli.args import bearer_metadata, job_resource, operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.packets import PacketFile, read_manifest_file, send_packet
from quire.cli.verify import ledger_checks, verify_file
from quire.client import AdmissionClient
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.pdfsignature import SignatureReport, verify_signed_pdf
from quire.pipeline import State
from quire.stack.supervisor import Stack, StackInfo
from quire.tls import TlsSettings
from quire.type import job_pb2

DEFAULT_DATA_DIR = Path(".quire")


def _job_line(job: job_pb2.Job) -> str:
    parts = [job.name, state_name(job.state)]
    if job.reason_code:
        parts.append(job.reason_code)
    if job.output_digest:
        parts.append(f"sha256={job.output_digest}")
    return "  ".join(parts)


async def _submit(args: argparse.Namespace, config: ClientConfig) -> int:
    if args.manifest:
        files, options = read_manifest_file(Path(args.manifest))
    else:
        files = [PacketFile(Path(f).stem, Path(f).resolve(), i) for i, f in enumerate(args.files)]
        options = {}
    if not files:
        print("nothing to submit: give files or --manifest", file=sys.stderr)
        return 2
    async with AdmissionClient(config.admission, config.token, tls=config.tls) as client:
        job = await send_packet(client, files, options)
        print(_job_line(job))
        if args.wait:
            job = await client.wait(job.name, timeout=args.timeout)
            print(_job_line(job))
            return 0 if state_name(job.state) == State.COMPLETED else 1
    return 0


async def _status(args: argparse.Namespace, config: ClientConfig) -> int:
    async with AdmissionClient(config.admission, config.token, tls=config.tls) as client:
        print(_job_line(await client.get_job(job_resource(args.job))))
    return 0


async def _wait(args: argparse.Namespace, config: ClientConfig) -> int:
    async with AdmissionClient(config.admission, config.token, tls=config.tls) as client:
        job = await client.wait(job_resource(args.job), timeout=args.timeout)
    print(_job_line(job))
    return 0 if state_name(job.state) == State.COMPLETED else 1


async def _fetch(args: argparse.Namespace, config: ClientConfig) -> int:
    async with AdmissionClient(config.admission, config.token, tls=config.tls) as client:
        digest = await client.download(job_resource(args.job), Path(args.output))
    print(f"{args.output}  sha256={digest}")
    return 0


async def _jobs(args: argparse.Namespace, config: ClientConfig) -> int:
    token = ""
    async with AdmissionClient(config.admission, config.token, tls=config.tls) as client:
        while True:
            page = await client.list_jobs(page_token=token, state=args.state or "")
            for job in page.jobs:
                print(_job_line(job))
            token = page.next_page_token
            if not token:
                return 0


async def _cancel(args: argparse.Namespace, config: ClientConfig) -> int:
    async with AdmissionClient(config.admission, config.token, tls=config.tls) as client:
        job = await client.cancel(job_resource(args.job))
    print(_job_line(job))
    return 0 if state_name(job.state) == State.CANCELLED else 1


def _verify_offline(args: argparse.Namespace) -> int:
    """``quire verify FILE --cert CERT``: no stack, no token; the certificates given."""
    if args.job:
        print("--job needs the stack's ledger; leave out --cert to use it", file=sys.stderr)
        return 2
    pems = [Path(path).read_text() for path in args.cert]
    return _print_signature(verify_signed_pdf(args.file, pems), ledger=[])


async def _verify(args: argparse.Namespace, config: ClientConfig) -> int:
    report = await verify_file(
        Path(args.file), config.signer, config.tls, metadata=operator_metadata(config)
    )
    checks: list[tuple[str, bool]] = []
    if args.job:
        async with AdmissionClient(config.admission, config.token, tls=config.tls) as client:
            checks = await ledger_checks(
                Path(args.file),
                job_resource(args.job),
                admission=client,
                audit_address=config.audit,
                tls=config.tls,
                metadata=operator_metadata(config),
            )
    return _print_signature(report, ledger=checks)


def _print_signature(report: SignatureReport, *, ledger: list[tuple[str, bool]]) -> int:
    print(f"signatures: {report.signature_count}")
    print(f"intact: {report.intact}  valid: {report.valid}")
    print(f"covers whole file: {report.covers_whole_file}")
    print(
        f"made by a trusted key (the stack's, or --cert): trusted: {report.trusted}  "
        f"certificate sha256={report.certificate_sha256}"
    )
    ok = report.ok
    for label, passed in ledger:
        print(f"{label}: {passed}")
        ok = ok and passed
    print("OK" if ok else "NOT VERIFIED")
    return 0 if ok else 1


async def _audit_verify(args: argparse.Namespace, config: ClientConfig) -> int:
    from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
    from quire.tls import aio_channel

    async with aio_channel(config.audit, config.tls) as channel:
        report = await audit_service_pb2_grpc.AuditServiceStub(channel).VerifyLedger(
            audit_service_pb2.VerifyLedgerRequest(),
            metadata=operator_metadata(config),
            timeout=600,
        )
    print(
        f"entries: {report.entries}  chains: {report.chains}  "
        f"checkpoints checked: {report.checkpoints_checked}"
    )
    for finding in report.findings:
        what = f" {finding.column}" if finding.column else ""
        which = f" of {finding.job}" if finding.job else ""
        print(
            f"{finding.kind}{what}{which} at sequence {finding.sequence} (tenant {finding.tenant})"
        )
    print("OK" if report.ok else "LEDGER DOES NOT VERIFY")
    return 0 if report.ok else 1


async def _evidence(args: argparse.Namespace, config: ClientConfig) -> int:
    from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
    from quire.tls import aio_channel

    async with aio_channel(config.audit, config.tls) as channel:
        evidence = await audit_service_pb2_grpc.AuditServiceStub(channel).ExportEvidence(
            audit_service_pb2.ExportEvidenceRequest(job=job_resource(args.job)),
            metadata=operator_metadata(config),
            timeout=120,
        )
    Path(args.output).write_text(evidence.json)
    print(f"{args.output}  evidence for {evidence.job}")
    return 0


def _evidence_verify(args: argparse.Namespace) -> int:
    import json

    from quire.audit.evidence import (
        public_key_fingerprint,
        retirements,
        summaries,
        verify_evidence,
    )

    document = json.loads(Path(args.file).read_text())
    problems = verify_evidence(document, args.key_sha256 or None)
    proof = max((len(e.get("inclusion_proof", [])) for e in document.get("entries", [])), default=0)
    print(
        f"job {document.get('job')}: {len(document.get('entries', []))} entries in "
        f"{document.get('origin')}, inclusion proofs of up to {proof} hashes"
    )
    print(f"checkpoint key sha256 {public_key_fingerprint(document['public_key'])}")
    for problem in problems:
        print(f"problem: {problem}")
    if not problems:  # shown only once proven
        for entry in summaries(document):
            print(
                f"  #{entry['index']} {entry['to_state']} {entry['reason_code']} {entry['actor']}"
            )
        for retired in retirements(document):
            print(
                f"  bytes retired under the retention policy: {retired['kind']} "
                f"sha256={retired['sha256']} size={retired['size_bytes']} "
                f"rule={retired['rule']} period={retired['period_seconds']}s "
                f"since={retired['since']} at={retired['retired_at']}"
            )
    print("OK" if not problems else "EVIDENCE DOES NOT VERIFY")
    return 0 if not problems else 1


async def _send_example(info: StackInfo, example: Path) -> None:
    files, options = read_manifest_file(example / "manifest.json")
    tls = TlsSettings.from_env()
    async with AdmissionClient(info.endpoints["admission"], info.token(), tls=tls) as client:
        job = await send_packet(client, files, options)
        print(f"example packet submitted: {job.name}")
        job = await client.wait(job.name, timeout=120)
        print(_job_line(job))
        if state_name(job.state) != State.COMPLETED:
            raise SystemExit(f"example packet ended {state_name(job.state)} {job.reason_code}")
        output = Path(info.data_dir) / "out" / f"{job.name.removeprefix('jobs/')}.pdf"
        await client.download(job.name, output)
    operator = bearer_metadata(info.operator_token())
    report = await verify_file(output, info.endpoints["signer"], tls, metadata=operator)
    print(f"signed PDF: {output}  ({'verified' if report.ok else 'NOT VERIFIED'})")
    if not report.ok:
        raise SystemExit("the example packet's signature did not verify")


def _up(args: argparse.Namespace) -> int:
    import os

    stack = Stack(Path(args.data_dir), nats_url=os.environ.get("QUIRE_NATS_URL") or None)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"starting Quire in {stack.data_dir} ...", flush=True)
    try:
        info = stack.start()
        print(f"NATS JetStream: {info.nats_url}")
        for service, address in info.endpoints.items():
            print(f"{service:>10}: {address}")
        print(f"development token: {info.token()}")
        if args.example:
            asyncio.run(_send_example(info, Path(args.example)))
        command = sys.argv[0] if Path(sys.argv[0]).name == "quire" else "quire"
        print(f"\nsubmit another: {command} --data-dir {args.data_dir} submit FILE.pdf ... --wait")
        print("serving; press Ctrl-C to stop", flush=True)
        stop.wait()
    finally:
        print("stopping ...", flush=True)
        stack.stop()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quire", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help="stack data directory")
    # --data-dir is accepted before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", default=argparse.SUPPRESS, help="stack data directory")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's word
        return commands.add_parser(name, help=help, parents=[common])

    up = command("up", help="start the embedded stack")
    up.add_argument("--example", help="send the example packet in this folder once up")
    submit = command("submit", help="send a packet: files in order, or --manifest")
    submit.add_argument("files", nargs="*")
    submit.add_argument("--manifest")
    submit.add_argument("--wait", action="store_true")
    submit.add_argument("--timeout", type=float, default=120.0)
    status = command("status", help="a job's state")
    status.add_argument("job")
    wait = command("wait", help="wait for a job to end")
    wait.add_argument("job")
    wait.add_argument("--timeout", type=float, default=120.0)
    fetch = command("fetch", help="download a completed job's signed PDF")
    fetch.add_argument("job")
    fetch.add_argument("-o", "--output", required=True)
    verify = command("verify", help="check a signed PDF against the stack's keys")
    verify.add_argument("file")
    verify.add_argument("--job", help="also check the file against this job's ledger record")
    verify.add_argument(
        "--cert",
        action="append",
        default=[],
        help="offline: trust this PEM certificate instead of asking the stack (repeatable)",
    )
    jobs = command("jobs", help="your jobs, newest first")
    jobs.add_argument("--state", help="only jobs in this state, e.g. COMPLETED")
    cancel = command("cancel", help="cancel a job that has not started signing")
    cancel.add_argument("job")
    tenants = command("tenants", help="operators: tenants").add_subparsers(
        dest="action", required=True
    )
    create = tenants.add_parser("create", parents=[common])
    create.add_argument("name")
    create.add_argument("--max-upload-bytes", type=int, default=0)
    create.add_argument("--max-outstanding-jobs", type=int, default=0)
    create.add_argument(
        "--storage-quota-bytes", type=int, default=0, help="bytes of uploads it may keep"
    )
    tenants.add_parser("list", parents=[common])
    retention_commands.add_tenant_arguments(tenants, common)
    tokens = command("tokens", help="operators: bearer tokens").add_subparsers(
        dest="action", required=True
    )
    tokens.add_parser("create", parents=[common]).add_argument("tenant")
    tokens.add_parser("revoke", parents=[common]).add_argument("token")
    review = command("review", help="operators: jobs parked for review").add_subparsers(
        dest="action", required=True
    )
    audit = command("audit", help="operators: the ledger").add_subparsers(
        dest="action", required=True
    )
    audit.add_parser("verify", parents=[common])
    dlq = command("dlq", help="operators: jobs that ended FAILED").add_subparsers(
        dest="action", required=True
    )
    listing = dlq.add_parser("list", parents=[common])
    listing.add_argument("--all", action="store_true", help="include retried and discarded")
    listing.add_argument("--limit", type=int, default=100)
    dlq.add_parser(
        "retry", parents=[common], help="a new attempt, recorded in the ledger"
    ).add_argument("job")
    dlq.add_parser("discard", parents=[common], help="leave the job FAILED").add_argument("job")
    evidence = command("evidence", help="a job's evidence: export, or verify offline")
    evidence.add_argument("job", help="a job, or `verify`")
    evidence.add_argument("file", nargs="?", help="with `verify`: the evidence file")
    evidence.add_argument("-o", "--output", default="")
    evidence.add_argument("--key-sha256", default="", help="the checkpoint key to trust")
    check.add_arguments(
        command("check", help="operators: check every invariant over the data directory")
    )
    retention_commands.add_arguments(
        command("retention", help="operators: retire stored bytes under the retention policy"),
        common,
    )
    keys.add_arguments(command("keys", help="operators: tenants' data keys and KEKs"), common)
    provision.add_arguments(
        command("credentials", help="operators: identity keys and NATS logins for a cluster"),
        command("nats", help="operators: lay out the queue topology"),
    )
    review.add_parser("list", parents=[common])
    for decision in ("approve", "reject"):
        decide = review.add_parser(decision, parents=[common])
        decide.add_argument("job")
        decide.add_argument("--note", required=True)
        decide.add_argument("--operator", default="")
    return parser


COMMANDS = {
    "submit": _submit,
    "status": _status,
    "wait": _wait,
    "fetch": _fetch,
    "verify": _verify,
    "jobs": _jobs,
    "cancel": _cancel,
    "tenants create": operators.tenants_create,
    "tenants list": operators.tenants_list,
    "tenants retention": retention_commands.tenants_retention,
    "retention apply": retention_commands.run_apply,
    "tokens create": operators.tokens_create,
    "tokens revoke": operators.tokens_revoke,
    "review list": reviews.review_list,
    "audit verify": _audit_verify,
    "dlq list": deadletters.dlq_list,
    "dlq retry": deadletters.dlq_retry,
    "dlq discard": deadletters.dlq_discard,
    "evidence": _evidence,
    "review approve": reviews.review_approve,
    "review reject": reviews.review_reject,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        return _up(args)
    if args.command == "check":
        return check.run(args)  # reads the data directory; needs no running stack
    if args.command == "retention" and args.action == "plan":
        return retention_commands.run_plan(args)  # reads the data directory; changes nothing
    if args.command == "verify" and args.cert:
        return _verify_offline(args)  # the certificates given; no stack
    if args.command in ("credentials", "nats"):
        return provision.run(args)  # no running stack
    if args.command == "keys":
        return keys.run(args)  # the key ring beside the blobs; no running stack
    if args.command == "evidence" and args.job == "verify":
        return _evidence_verify(args)  # offline: needs no stack
    if args.command == "evidence":
        args.output = args.output or f"{job_resource(args.job).removeprefix('jobs/')}.evidence.json"
    config = ClientConfig.load(Path(args.data_dir))
    try:
        name = f"{args.command} {args.action}" if getattr(args, "action", None) else args.command
        return asyncio.run(COMMANDS[name](args, config))
    except grpc.aio.AioRpcError as error:
        print(
            f"error: {error.code().name} {reason_of(error) or ''} {error.details()}",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
