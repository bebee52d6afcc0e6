"""Admission's notifier over a real SQLite outbox and a real loopback receiver:
retries with backoff until a 2xx, every try recorded, claims that keep a
second notifier off a row, and notifications abandoned when they cannot go."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from quire.admission import tables
from quire.admission.notifications.notifier import Notifier
from quire.admission.notifications.outbox import queue_notification
from quire.admission.notifications.secrets import NotificationSecrets
from quire.admission.settings import NotificationSettings
from quire.database import Database
from quire.datakeys import DataKeys
from quire.errors import PermanentError
from quire.kek import KekRing, SoftwareKek
from quire.stack.ports import free_port
from quire.testing.callbackreceiver import CallbackReceiver
from quire.testing.loopbackegress import LOOPBACK_EGRESS

FAST = NotificationSettings(
    max_attempts=4,
    backoff_base_seconds=0.02,
    backoff_cap_seconds=0.1,
    timeout_seconds=0.5,
    poll_seconds=0.05,
    allow_loopback_http=True,
)
DOCUMENT = {"name": "jobs/j1", "state": "COMPLETED", "output_digest": "ab" * 32}


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path / 'admission.db'}", tables.metadata)
    db.create_schema()
    now = datetime.now(UTC)
    with db.engine.begin() as connection:
        for tenant in ("t1", "t2"):
            connection.execute(
                insert(tables.tenants).values(id=tenant, name=f"tenant {tenant}", created_at=now)
            )
    yield db
    db.close()


@pytest.fixture
def secrets(tmp_path: Path) -> NotificationSecrets:
    ring = KekRing(SoftwareKek("test-kek", os.urandom(32)), [])
    return NotificationSecrets(DataKeys(tmp_path / "blobs", ring))


def _register(database: Database, secrets: NotificationSecrets, tenant: str, url: str) -> str:
    secret, sealed = secrets.make(tenant)
    database.transaction(
        lambda s: s.execute(
            insert(tables.notification_endpoints).values(
                tenant=tenant, url=url, secret_sealed=sealed, created_at=datetime.now(UTC)
            )
        )
    )
    return secret


def _queue(database: Database, tenant: str = "t1", subject: str = "jobs/j1") -> str:
    assert database.transaction(
        lambda s: queue_notification(s, tenant=tenant, subject=subject, document=DOCUMENT)
    )
    return _row(database, tenant, subject).delivery_id


def _row(database: Database, tenant: str, subject: str):  # type: ignore[no-untyped-def]
    outbox = tables.notifications.c
    return database.transaction(
        lambda s: s.execute(
            select(tables.notifications).where(outbox.tenant == tenant, outbox.subject == subject)
        ).one()
    )


def _attempts(database: Database, subject: str = "jobs/j1") -> list[tuple[int, int, str]]:
    c = tables.notification_attempts.c
    rows = database.transaction(
        lambda s: s.execute(
            select(c.attempt, c.http_status, c.outcome)
            .where(c.subject == subject)
            .order_by(c.attempt)
        ).all()
    )
    return [tuple(r) for r in rows]


@contextlib.asynccontextmanager
async def _running(notifier: Notifier) -> AsyncIterator[None]:
    task = asyncio.create_task(notifier.run_forever())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _until(check, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_failed_tries_are_retried_until_delivered_and_each_is_recorded(
    database: Database, secrets: NotificationSecrets
) -> None:
    receiver = CallbackReceiver(free_port(), script=("error", "hang"), hang_seconds=1.5)
    receiver.secret = _register(database, secrets, "t1", receiver.url)
    receiver.start()
    try:
        delivery_id = _queue(database)
        async with _running(Notifier(database, secrets, FAST, egress=LOOPBACK_EGRESS)):
            await _until(lambda: _row(database, "t1", "jobs/j1").delivered_at is not None)
    finally:
        receiver.stop()
    assert receiver.accepted == {delivery_id: DOCUMENT}
    assert receiver.verdicts(delivery_id) == ["error", "hang", "accepted"]
    assert _attempts(database) == [(1, 500, "REFUSED"), (2, 0, "TIMEOUT"), (3, 204, "DELIVERED")]
    row = _row(database, "t1", "jobs/j1")
    assert (row.attempts, row.abandoned_at) == (3, None)
    assert json.loads(row.payload) == DOCUMENT


async def test_unreachable_notification_is_abandoned_after_its_last_try(
    database: Database, secrets: NotificationSecrets
) -> None:
    _register(database, secrets, "t1", f"http://127.0.0.1:{free_port()}/nobody")
    _queue(database)
    async with _running(Notifier(database, secrets, FAST, egress=LOOPBACK_EGRESS)):
        await _until(lambda: _row(database, "t1", "jobs/j1").abandoned_at is not None)
    assert _attempts(database) == [(n, 0, "UNREACHABLE") for n in range(1, 5)]
    assert _row(database, "t1", "jobs/j1").delivered_at is None


def test_a_claimed_notification_is_not_claimed_again_until_its_claim_runs_out(
    database: Database, secrets: NotificationSecrets
) -> None:
    _register(database, secrets, "t1", "https://hooks.example.com/q")
    _queue(database)
    first, second = (
        Notifier(database, secrets, FAST, egress=LOOPBACK_EGRESS),
        Notifier(database, secrets, FAST, egress=LOOPBACK_EGRESS),
    )
    claimed = database.transaction(lambda s: first.claim(s, 10))
    assert [(c.subject, c.attempt) for c in claimed] == [("jobs/j1", 1)]
    assert database.transaction(lambda s: second.claim(s, 10)) == []
    past = datetime.now(UTC) - timedelta(seconds=1)
    database.transaction(
        lambda s: s.execute(tables.notifications.update().values(next_attempt_at=past))
    )
    again = database.transaction(lambda s: second.claim(s, 10))
    assert [(c.delivery_id, c.attempt) for c in again] == [(claimed[0].delivery_id, 2)]


def test_one_tenant_takes_at_most_its_share_of_the_slots(
    database: Database, secrets: NotificationSecrets
) -> None:
    for tenant in ("t1", "t2"):
        _register(database, secrets, tenant, "https://hooks.example.com/q")
        for n in range(6):
            _queue(database, tenant, f"jobs/{tenant}-{n}")
    settings = NotificationSettings(concurrency=8, tenant_concurrency=3)
    claimed = database.transaction(
        lambda s: Notifier(database, secrets, settings, egress=LOOPBACK_EGRESS).claim(s, 8)
    )
    assert sorted(c.tenant for c in claimed) == ["t1"] * 3 + ["t2"] * 3


def test_a_removed_endpoint_abandons_its_notifications(
    database: Database, secrets: NotificationSecrets
) -> None:
    _register(database, secrets, "t1", "https://hooks.example.com/q")
    _queue(database)
    database.transaction(lambda s: s.execute(tables.notification_endpoints.delete()))
    assert (
        database.transaction(
            lambda s: Notifier(database, secrets, FAST, egress=LOOPBACK_EGRESS).claim(s, 10)
        )
        == []
    )
    assert _row(database, "t1", "jobs/j1").abandoned_at is not None
    assert _attempts(database) == []


def test_a_job_gets_one_notification_however_often_its_end_is_queued(
    database: Database, secrets: NotificationSecrets
) -> None:
    _register(database, secrets, "t1", "https://hooks.example.com/q")
    _queue(database)
    assert not database.transaction(
        lambda s: queue_notification(s, tenant="t1", subject="jobs/j1", document=DOCUMENT)
    )


def test_the_secret_is_stored_sealed_to_its_tenant(
    database: Database, secrets: NotificationSecrets
) -> None:
    secret = _register(database, secrets, "t1", "https://hooks.example.com/q")
    sealed = database.transaction(
        lambda s: s.execute(select(tables.notification_endpoints.c.secret_sealed)).scalar_one()
    )
    assert len(secret) == 64 and secret.encode() not in sealed
    assert secrets.open("t1", sealed) == secret
    with pytest.raises(PermanentError):
        secrets.open("t2", sealed)


async def test_a_notifier_cancelled_as_it_is_woken_ends(
    database: Database, secrets: NotificationSecrets
) -> None:
    """The wake and the cancel in one turn of the loop: the wake's wait is done
    first, and asyncio.wait_for (Python 3.11) then returned instead of raising,
    so the notifier looked at the outbox again and never ended (a drain, or a
    test, waited on it for ever)."""
    notifier = Notifier(
        database, secrets, NotificationSettings(poll_seconds=30), egress=LOOPBACK_EGRESS
    )
    task = asyncio.create_task(notifier.run_forever())
    await asyncio.sleep(0.3)  # at its wait, the outbox empty
    notifier.wake()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
