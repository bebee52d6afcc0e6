"""``quire submit|status|wait|fetch|jobs|cancel|verify``: a tenant's own jobs."""

from __future__ import annotations

import argparse
from pathlib import Path

from quire.cli.args import job_resource, operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output, job_dict
from quire.cli.packets import PacketFile, packet_files, read_manifest_file, send_packet
from quire.cli.progress import progress_wanted, waiting
from quire.cli.verify import ledger_checks, verify_file
from quire.client import AdmissionClient
from quire.jobs import state_name
from quire.pdfsignature import SignatureReport, certificate_sha256, verify_signed_pdf
from quire.pipeline import State
from quire.type import job_pb2

__all__ = [
    "job_line",
    "job_exit",
    "submit",
    "status",
    "wait",
    "fetch",
    "jobs",
    "cancel",
    "verify",
    "verify_offline",
]


def job_line(job: job_pb2.Job) -> str:
    parts = [job.name, state_name(job.state)]
    if job.reason_code:
        parts.append(job.reason_code)
    if job.output_digest:
        parts.append(f"sha256={job.output_digest}")
    return "  ".join(parts)


def delivery_line(job: job_pb2.Job) -> str:
    """``deliveries 5, attempt 2``: the job's deliveries to stage workers so
    far and the delivery count of the step recorded last (``no stage step
    yet`` before any)."""
    if not job.deliveries and not job.attempt:
        return "deliveries 0 (no stage step yet)"
    return f"deliveries {job.deliveries}, attempt {job.attempt}"


def timing_line(job: job_pb2.Job) -> str:
    """``validate: queue_wait 3 ms, fetch 1 ms, ...; assemble: ...`` (empty
    before any stage has finished with the job)."""
    stages: dict[str, list[str]] = {}
    for timing in job.timings:
        milliseconds = timing.duration.ToMicroseconds() / 1000
        phase = f"{timing.phase} {timing.source_system}" if timing.source_system else timing.phase
        stages.setdefault(timing.stage, []).append(f"{phase} {milliseconds:.0f} ms")
    return "; ".join(f"{stage}: {', '.join(phases)}" for stage, phases in stages.items())


def pin_lines(job: job_pb2.Job) -> list[str]:
    """The job's deadline, and what was pinned for each source named by
    reference: ``source 1 from tax:orders/A-17 sha256=… (tax-record@1,
    fetched 12:00:01Z)``."""
    lines = []
    if job.HasField("deadline"):
        lines.append(f"deadline {job.deadline.ToJsonString()}")
    for pin in job.pins:
        how = ", ".join(
            part
            for part in (
                pin.schema_version,
                f"fetched {pin.fetch_time.ToDatetime().strftime('%H:%M:%SZ')}",
                *pin.normalisations,
            )
            if part
        )
        lines.append(
            f"source {pin.position} from {pin.system}:{pin.key} sha256={pin.sha256} ({how})"
        )
    return lines


def wait_lines(job: job_pb2.Job) -> list[str]:
    """``waiting for source system tax: breaker open, next try 12:00:03Z``,
    one per source system the job waits for (none when it waits for none)."""
    lines = []
    for wait in job.source_waits:
        line = f"waiting for source system {wait.system}: breaker {wait.breaker or 'unknown'}"
        if wait.HasField("retry_time"):
            line += f", next try {wait.retry_time.ToDatetime().strftime('%H:%M:%SZ')}"
        lines.append(line)
    return lines


def job_exit(job: job_pb2.Job) -> int:
    """0 when the job completed, REJECTED when it was refused, FAILED otherwise."""
    state = state_name(job.state)
    if state == State.COMPLETED:
        return ExitCode.OK
    if state == State.REJECTED:
        return ExitCode.REJECTED
    return ExitCode.FAILED


def _client(config: ClientConfig) -> AdmissionClient:
    return AdmissionClient(config.admission, config.token, tls=config.tls)


def _existing(path: str) -> Path:
    if not Path(path).is_file():
        raise CliError(f"no such file: {path}")
    return Path(path)


def _packet(args: argparse.Namespace) -> tuple[list[PacketFile], dict[str, str]]:
    """The files to send and the job's options: a manifest's, then the flags'."""
    if args.manifest and args.files:
        raise CliError("give files or --manifest, not both")
    if args.manifest:
        files, options = read_manifest_file(_existing(args.manifest))
    else:
        files, options = packet_files(args.files), {}
    if not files:
        raise CliError("nothing to submit: give files or --manifest")
    if args.ruleset:
        options["ruleset"] = args.ruleset
    if args.render_profile:
        options["render_profile"] = args.render_profile
    return files, options


async def submit(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    files, options = _packet(args)
    show = progress_wanted(out.as_json)
    async with _client(config) as client:
        job = await send_packet(client, files, options, show_progress=show)
        out.line(job_line(job))
        out.result({"job": job_dict(job)})
        if not args.wait:
            return ExitCode.OK
        with waiting(job.name, enabled=show):
            job = await client.wait(job.name, timeout=args.timeout)
    out.line(job_line(job))
    out.result({"job": job_dict(job)})
    return job_exit(job)


async def status(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as client:
        job = await client.get_job(job_resource(args.job))
    out.line(job_line(job))
    out.line(f"  {delivery_line(job)}")
    if job.timings:
        out.line(f"  {timing_line(job)}")
    for line in (*pin_lines(job), *wait_lines(job)):
        out.line(f"  {line}")
    # Zero counts too (MessageToDict leaves zeros out): 0 says "no step yet".
    out.result({"job": {**job_dict(job), "deliveries": job.deliveries, "attempt": job.attempt}})
    return ExitCode.OK


async def wait(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    name = job_resource(args.job)
    async with _client(config) as client:
        # Asked once first: a stack that is not there, or a job that is not,
        # is said at once (the watch itself rides out a restart of the stack).
        await client.get_job(name)
        with waiting(name, enabled=progress_wanted(out.as_json)):
            job = await client.wait(name, timeout=args.timeout)
    out.line(job_line(job))
    out.result({"job": job_dict(job)})
    return job_exit(job)


async def fetch(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    name = job_resource(args.job)
    async with _client(config) as client:
        digest = await client.download(name, Path(args.output))
    out.line(f"{args.output}  sha256={digest}")
    out.result({"job": name, "output": str(args.output), "sha256": digest})
    return ExitCode.OK


async def jobs(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    token = ""
    listed: list[job_pb2.Job] = []
    async with _client(config) as client:
        while True:
            page = await client.list_jobs(page_token=token, state=args.state or "")
            for job in page.jobs:
                out.line(job_line(job))
            listed.extend(page.jobs)
            token = page.next_page_token
            if not token:
                break
    if not listed:
        out.line(f"no {args.state} jobs" if args.state else "no jobs")
    out.result({"jobs": [job_dict(job) for job in listed]})
    return ExitCode.OK


async def cancel(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    """Exit 0 when the job is CANCELLED; when the cancel lost (signing had
    begun, or the job had ended) say so, with the state the job reached as
    audit records it, and exit FAILED."""
    async with _client(config) as client:
        answer = await client.try_cancel(job_resource(args.job), request_id=args.request_id)
    job = answer.job
    if answer.lost:
        out.line(f"cancel lost ({answer.outcome}): {job.name} had already reached {answer.state}")
    out.line(job_line(job))
    out.result({"job": job_dict(job), "cancelled": answer.cancelled, "outcome": answer.outcome})
    return ExitCode.OK if answer.cancelled else ExitCode.FAILED


def _certificate(path: str) -> str:
    """A ``--cert`` file's PEM certificate."""
    try:
        pem = _existing(path).read_text()
        certificate_sha256(pem)
    except ValueError:
        raise CliError(f"not a PEM certificate: {path}") from None
    return pem


def _readable(report: SignatureReport, path: Path) -> SignatureReport:
    """The report of a file that could be read as a signed PDF; else the
    answer is no (FAILED), said in one line."""
    if report.unreadable:
        raise CliError(f"cannot verify {path}: {report.unreadable}", ExitCode.FAILED)
    return report


def verify_offline(args: argparse.Namespace, out: Output) -> int:
    """``quire verify FILE --cert CERT``: no stack, no token; the certificates given."""
    if args.job:
        raise CliError("--job needs the stack's ledger; leave out --cert to use it")
    path = _existing(args.file)
    pems = [_certificate(cert) for cert in args.cert]
    return _signature_result(_readable(verify_signed_pdf(str(path), pems), path), [], out)


async def verify(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    path = _existing(args.file)
    report = await verify_file(path, config.signer, config.tls, metadata=operator_metadata(config))
    report = _readable(report, path)
    checks: list[tuple[str, bool]] = []
    if args.job:
        async with _client(config) as client:
            checks = await ledger_checks(
                path,
                job_resource(args.job),
                admission=client,
                audit_address=config.audit,
                tls=config.tls,
                metadata=operator_metadata(config),
            )
    return _signature_result(report, checks, out)


def _signature_result(report: SignatureReport, ledger: list[tuple[str, bool]], out: Output) -> int:
    out.line(f"signatures: {report.signature_count}")
    out.line(f"intact: {report.intact}  valid: {report.valid}")
    out.line(f"covers whole file: {report.covers_whole_file}")
    out.line(
        f"made by a trusted key (the stack's, or --cert): trusted: {report.trusted}  "
        f"certificate sha256={report.certificate_sha256}"
    )
    ok = report.ok
    for label, passed in ledger:
        out.line(f"{label}: {passed}")
        ok = ok and passed
    out.line("OK" if ok else "NOT VERIFIED")
    out.result(
        {
            "signatures": report.signature_count,
            "intact": report.intact,
            "valid": report.valid,
            "covers_whole_file": report.covers_whole_file,
            "trusted": report.trusted,
            "certificate_sha256": report.certificate_sha256,
            "signer_identity": report.signer_identity,
            "timestamped": report.timestamped,
            "ledger": [{"check": label, "passed": passed} for label, passed in ledger],
            "ok": ok,
        }
    )
    return ExitCode.OK if ok else ExitCode.FAILED
