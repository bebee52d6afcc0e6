"""Streams that protect what they hold: create-only entries, and safety
settings brought up to date on streams made earlier.

A create-only stream (``create_only_stream``) keeps one message a subject
and refuses a second — a put, a delete or purge marker — and rollup headers:
the job gate and the key ring are made so, and ``create_entry`` writes
their entries. JetStream refuses some changes to a stream made earlier (a
key-value bucket's ``deny_delete`` cannot be lifted, nor its message
time-to-live turned off), so ``ensure_safe_stream`` keeps a stream's own
configuration and changes only the named safety settings. A stream already
as it should be is left alone: a service login, which may not update
streams, can call it as well as provisioning.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterable
from typing import Any

import nats.js.errors
from nats.js import JetStreamContext, api

__all__ = ["create_entry", "create_entry_at", "create_only_stream", "ensure_safe_stream"]

_EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
_TAKEN = frozenset({10071, 10077})
"""JetStream's answers when a subject holds a message already: the expected
last sequence does not hold, or the per-subject limit refuses a second."""
_IN_PROCESS = 10164
"""A replicated stream's answer while another write expecting the subject's
last sequence is in flight ("wrong last sequence", without one): that write
may yet land or fail, so the subject is neither taken nor free until it
settles. Asked again after a pause, the answer is one of the others."""
IN_PROCESS_PAUSES = (0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
"""The pauses before asking again (about 6 s in all, a few raft rounds on a
loaded cluster); past them the last answer is raised."""


async def create_entry(js: JetStreamContext, subject: str, value: bytes) -> bool:
    """Store ``value`` as ``subject``'s first message; False when it has one."""
    return await create_entry_at(js, subject, value) is not None


async def create_entry_at(js: JetStreamContext, subject: str, value: bytes) -> int | None:
    """``create_entry``: the stream sequence the entry was stored at, or
    None when the subject has a message already. Two writers racing on a
    replicated stream: the loser is told so once the winner's write settled."""
    for pause in (*IN_PROCESS_PAUSES, None):
        try:
            ack = await js.publish(subject, value, headers={_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
        except nats.js.errors.APIError as error:
            if error.err_code in _TAKEN:
                return None
            if error.err_code != _IN_PROCESS or pause is None:
                raise
            await asyncio.sleep(pause)
            continue
        return ack.seq
    raise AssertionError("unreachable: the last pause raises")


def create_only_stream(
    name: str, subjects: list[str], replicas: int, **more: Any
) -> api.StreamConfig:
    """A stream holding one message a subject that nothing replaces: a second
    message on a subject (a put, a delete or purge marker) is refused, and so
    are rollup headers. ``more``: further settings (an age limit, denials)."""
    return api.StreamConfig(
        name=name,
        subjects=subjects,
        storage=api.StorageType.FILE,
        num_replicas=replicas,
        max_msgs_per_subject=1,
        discard=api.DiscardPolicy.NEW,
        discard_new_per_subject=True,
        allow_rollup_hdrs=False,
        allow_direct=True,
        **more,
    )


async def ensure_safe_stream(
    js: JetStreamContext, config: api.StreamConfig, safety: Iterable[str]
) -> None:
    """Make ``config``'s stream if missing; else set the ``safety`` settings
    of the existing one to ``config``'s values."""
    try:
        info = await js.stream_info(config.name or "")
    except nats.js.errors.NotFoundError:
        with contextlib.suppress(nats.js.errors.BadRequestError):  # made concurrently
            await js.add_stream(config)
            return
        info = await js.stream_info(config.name or "")
    wanted = {name: getattr(config, name) for name in safety}
    if any(getattr(info.config, name) != value for name, value in wanted.items()):
        await js.update_stream(dataclasses.replace(info.config, **wanted))
