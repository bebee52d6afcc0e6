"""Announcements: which processes run, at which deployable version, able to
run which rulesets (issue 20, "Versions on every step").

Every service process puts one entry in the JetStream key-value bucket
``quire_workers`` under ``<service>.<instance>`` and refreshes it every
``QueueSettings.worker_heartbeat_seconds``; the bucket keeps a message for
``QueueSettings.worker_ttl_seconds`` (a few heartbeats), so the entry of a
process that died disappears on its own. A clean shutdown deletes it at the
start of the drain. The value is JSON::

    {"service": "validator", "instance": "host-123", "build_version": "2026.12.1-3",
     "rulesets": ["default@1"], "track": "baseline",
     "started_at": "2026-...Z", "heartbeat_at": "2026-...Z"}

A service may write only its own service's keys (``quire.natsauth``); the
operator reads them all (``quire workers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, NoKeysError
from nats.js.kv import KeyValue

if TYPE_CHECKING:
    from quire.settings import ServiceSettings

__all__ = [
    "WORKERS_BUCKET",
    "BASELINE",
    "Announcement",
    "Announcer",
    "instance_key",
    "worker_key",
    "read_announcements",
]

WORKERS_BUCKET = "quire_workers"
BASELINE = "baseline"
"""The track a process serves unless it is a rollout's candidate
(``quire.workqueue.routing``)."""
_NOT_IN_KEY = re.compile(r"[^A-Za-z0-9_-]")
MAX_INSTANCE_KEY = 128

log = logging.getLogger(__name__)


def instance_key(instance: str) -> str:
    """``instance`` as one token of a KV key: characters other than
    ``A-Z a-z 0-9 _ -`` (dots, which would split the token, included) become
    ``_``; at most 128 characters; never empty."""
    return _NOT_IN_KEY.sub("_", instance)[:MAX_INSTANCE_KEY] or "_"


def worker_key(service: str, instance: str) -> str:
    """The bucket key of one process: ``<service>.<instance>``."""
    return f"{service}.{instance_key(instance)}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Announcement:
    service: str
    instance: str
    build_version: str
    rulesets: list[str] = field(default_factory=list)
    """The ruleset keys (``name@version``) this process can run: the validator's
    published rulesets; empty for the other services."""
    track: str = BASELINE
    started_at: str = ""
    heartbeat_at: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Announcement:
        body: dict[str, Any] = json.loads(data)
        return cls(
            service=str(body["service"]),
            instance=str(body["instance"]),
            build_version=str(body["build_version"]),
            rulesets=[str(key) for key in body.get("rulesets", [])],
            track=str(body.get("track", BASELINE)),
            started_at=str(body.get("started_at", "")),
            heartbeat_at=str(body.get("heartbeat_at", "")),
        )

    def heartbeat_time(self) -> datetime | None:
        try:
            return datetime.fromisoformat(self.heartbeat_at.replace("Z", "+00:00"))
        except ValueError:
            return None


class Announcer:
    """Keeps one process's entry in the workers bucket: put at ``start``, put
    again every ``heartbeat_seconds``, deleted at ``stop``. A put that fails is
    logged and tried again at the next heartbeat: announcements inform
    operators, they never stop a process from working."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        service: str,
        instance: str,
        build_version: str,
        heartbeat_seconds: float,
        rulesets: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self._js = js
        self._key = worker_key(service, instance)
        self._rulesets = rulesets
        self._heartbeat_seconds = heartbeat_seconds
        self._announcement = Announcement(
            service=service,
            instance=instance,
            build_version=build_version,
            started_at=_now(),
        )
        self._kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @classmethod
    def of(
        cls,
        js: JetStreamContext,
        settings: ServiceSettings,
        rulesets: Callable[[], Sequence[str]] | None = None,
    ) -> Announcer:
        """The announcer of the process ``settings`` describe."""
        return cls(
            js,
            service=settings.service,
            instance=settings.instance,
            build_version=settings.build_version,
            heartbeat_seconds=settings.queue.worker_heartbeat_seconds,
            rulesets=rulesets,
        )

    @property
    def key(self) -> str:
        return self._key

    def set_track(self, track: str) -> None:
        """The track this process serves now; announced at once when running."""
        if track == self._announcement.track:
            return
        self._announcement = replace(self._announcement, track=track)
        if self._task is not None and not self._stopped:
            asyncio.get_running_loop().create_task(self.announce())

    async def start(self) -> None:
        """Announce once (so the entry exists when the process reports
        SERVING), then keep announcing in the background."""
        if self._stopped:
            return
        await self.announce()
        self._task = asyncio.create_task(self._every_heartbeat(), name="announcer")

    async def announce(self) -> bool:
        """Put the entry now; whether it was written."""
        rulesets = sorted(self._rulesets()) if self._rulesets is not None else []
        entry = replace(self._announcement, rulesets=rulesets, heartbeat_at=_now())
        try:
            if self._kv is None:
                self._kv = await self._js.key_value(WORKERS_BUCKET)
            await self._kv.put(self._key, entry.to_json())
        except Exception:  # noqa: BLE001 - NATS away or the bucket not provisioned yet
            log.warning("announcement not written; trying again at the next heartbeat")
            return False
        return True

    async def _every_heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_seconds)
            await self.announce()

    async def stop(self) -> None:
        """Stop the heartbeats and delete the entry (a clean shutdown). If the
        delete fails the entry still expires with its time-to-live. Only the
        first call does anything."""
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._kv is None:
            return
        try:
            await self._kv.delete(self._key)
        except Exception:  # noqa: BLE001 - it expires anyway
            log.warning("announcement not deleted; it expires with its time-to-live")


async def read_announcements(js: JetStreamContext) -> list[Announcement]:
    """Every entry in the workers bucket (an operator's read), by key."""
    kv = await js.key_value(WORKERS_BUCKET)
    try:
        keys = await kv.keys()
    except NoKeysError:
        return []
    found: list[Announcement] = []
    for key in sorted(keys):
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:  # expired or deleted since it was listed
            continue
        if entry.value:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                found.append(Announcement.from_json(entry.value))
    return found
