"""``quire notifications set URL | show | attempts SUBJECT``: the tenant's
completion-notification endpoint and the record of its deliveries.

``set`` prints the HMAC secret the one time admission shows it (a new
endpoint, or ``--rotate-secret``); keep it where the receiver can read it.
"""

from __future__ import annotations

import argparse

from quire.cli.args import job_resource
from quire.cli.config import ClientConfig
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output, message_dict
from quire.client import AdmissionClient

__all__ = ["attempts", "set_endpoint", "show", "subject_resource"]


def subject_resource(subject: str) -> str:
    """``batches/…`` as given; anything else is a job id or ``jobs/ID``."""
    return subject if subject.startswith("batches/") else job_resource(subject)


def _client(config: ClientConfig) -> AdmissionClient:
    return AdmissionClient(config.admission, config.token, tls=config.tls)


async def set_endpoint(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as client:
        reply = await client.set_notification_endpoint(
            args.url, rotate_secret=args.rotate_secret, request_id=args.request_id
        )
    if not reply.endpoint.url:
        out.line("no notification endpoint")
    else:
        out.line(f"notifications go to {reply.endpoint.url}")
    if reply.secret:
        out.line(f"secret (shown once; signs every notification): {reply.secret}")
    elif reply.secret_withheld:
        out.line("secret withheld: this request id was answered before; rotate to see a new one")
    out.result(message_dict(reply))
    return ExitCode.OK


async def show(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as client:
        endpoint = await client.get_notification_endpoint()
    out.line(endpoint.url or "no notification endpoint")
    out.result(message_dict(endpoint))
    return ExitCode.OK


async def attempts(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    subject = subject_resource(args.subject)
    async with _client(config) as client:
        reply = await client.list_notification_attempts(subject)
    for attempt in reply.attempts:
        out.line(f"{attempt.attempt:>3}  {attempt.attempt_time.ToJsonString()}  {attempt.outcome}")
    if reply.HasField("deliver_time"):
        out.line(f"delivered {reply.deliver_time.ToJsonString()}")
    elif not reply.attempts:
        out.line(f"no notification attempts for {subject}")
    out.result({"subject": subject, **message_dict(reply)})
    return ExitCode.OK
