"""``quire up``: run the embedded stack in the foreground until Ctrl-C or SIGTERM.

A second ``quire up`` on a data directory already in use is refused
(``DataDirInUse``, exit DATA_DIR_IN_USE) before anything starts: the stack's
lock on the directory, not a check of ``stack.json``, decides.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from quire.cli.args import bearer_metadata
from quire.cli.errors import CliError
from quire.cli.jobcommands import job_line
from quire.cli.output import Output, job_dict
from quire.cli.packets import PacketFile, read_manifest_file, send_packet
from quire.cli.progress import progress_wanted, waiting
from quire.cli.verify import verify_file
from quire.client import AdmissionClient
from quire.jobs import state_name
from quire.pipeline import State
from quire.stack.supervisor import ServicesNotInstalled, Stack, StackInfo
from quire.tls import TlsSettings

__all__ = ["run"]

EXAMPLE_TIMEOUT_SECONDS = 120


async def _send_example(
    info: StackInfo, example: tuple[list[PacketFile], dict[str, str]], out: Output
) -> dict[str, Any]:
    files, options = example
    tls = TlsSettings.from_env()
    show = progress_wanted(out.as_json)
    async with AdmissionClient(info.endpoints["admission"], info.token(), tls=tls) as client:
        job = await send_packet(client, files, options, show_progress=show)
        out.note(f"example packet submitted: {job.name}")
        with waiting(job.name, enabled=show):
            job = await client.wait(job.name, timeout=EXAMPLE_TIMEOUT_SECONDS)
        out.note(job_line(job))
        if state_name(job.state) != State.COMPLETED:
            raise SystemExit(f"example packet ended {state_name(job.state)} {job.reason_code}")
        output = Path(info.data_dir) / "out" / f"{job.name.removeprefix('jobs/')}.pdf"
        await client.download(job.name, output)
    operator = bearer_metadata(info.operator_token())
    report = await verify_file(output, info.endpoints["signer"], tls, metadata=operator)
    out.note(f"signed PDF: {output}  ({'verified' if report.ok else 'NOT VERIFIED'})")
    if not report.ok:
        raise SystemExit("the example packet's signature did not verify")
    return {"job": job_dict(job), "output": str(output), "verified": report.ok}


def run(args: argparse.Namespace, out: Output) -> int:
    # The example is read before anything starts: a typo costs no stack start.
    example = read_manifest_file(Path(args.example) / "manifest.json") if args.example else None
    stack = Stack(
        Path(args.data_dir), nats_url=os.environ.get("QUIRE_NATS_URL") or None, gateway=True
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    out.note(f"starting Quire in {stack.data_dir} ...")
    try:
        info = stack.start()  # DataDirInUse when another stack holds the directory
    except ServicesNotInstalled as error:
        raise CliError(str(error)) from None
    try:
        out.note(f"NATS JetStream: {info.nats_url}")
        for service, address in info.endpoints.items():
            out.note(f"{service:>10}: {address}")
        out.note(f"{'HTTP':>10}: {info.gateway_url}")
        out.note(f"{'console':>10}: {info.gateway_url}/console/ (the operator token signs in)")
        out.note(f"development token: {info.token()}")
        document: dict[str, Any] = {**asdict(info), "token": info.token()}
        if example is not None:
            document["example"] = asyncio.run(_send_example(info, example, out))
        command = sys.argv[0] if Path(sys.argv[0]).name == "quire" else "quire"
        out.line(
            f"\nsubmit another: {command} --data-dir {args.data_dir} submit FILE.pdf ... --wait"
        )
        out.emit(document)  # --json: the one document, printed once the stack serves
        out.note("serving; press Ctrl-C to stop")
        stop.wait()
    finally:
        out.note("stopping ...")
        stack.stop()
    return 0
