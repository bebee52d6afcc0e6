"""Nothing accepted is lost: a job committed but not handed on (a crash between
the commit and the publish) is published by the sweep, exactly once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from nats.js import JetStreamContext

from quire.admission import tables
from quire.admission.jobs.dispatch import Dispatcher
from quire.admission.jobs.intake import Intake
from quire.admission.settings import AdmissionSettings
from quire.admission.tenants.directory import Tenant
from quire.admission.v1 import admission_service_pb2 as pb
from quire.database import Database
from quire.transitions import EventFactory
from quire.type import job_pb2
from quire.workqueue import WORK_STREAM, Publisher, consumer_name

DIGEST = "d" * 64


def _admission_db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'admission.db'}", tables.metadata)
    database.create_schema()
    now = datetime.now(UTC)

    def seed(session) -> None:  # type: ignore[no-untyped-def]
        session.execute(tables.tenants.insert().values(id="t1", name="tenant", created_at=now))
        session.execute(
            tables.sources.insert().values(
                tenant="t1",
                sha256=DIGEST,
                size_bytes=10,
                content_type="application/pdf",
                blob_key=f"sources/t1/{DIGEST}",
                created_at=now,
            )
        )

    database.transaction(seed)
    return database


async def test_an_undispatched_job_is_published_by_the_sweep_once(
    tmp_path: Path, jetstream: JetStreamContext
) -> None:
    database = _admission_db(tmp_path)
    intake = Intake(database, EventFactory("admission", "test", "0"), AdmissionSettings())
    request = pb.SubmitJobRequest(
        request_id="r1",
        manifest=job_pb2.Manifest(
            items=[job_pb2.ManifestItem(position=0, document_id="doc", sha256=DIGEST)]
        ),
    )
    tenant = Tenant(id="t1", name="tenant")
    accepted = await intake.submit(tenant, request)
    assert not accepted.dispatched  # the "crash": committed, never published

    dispatcher = Dispatcher(database, Publisher(jetstream))
    assert await dispatcher.sweep(older_than=timedelta(0)) == 1
    assert await dispatcher.sweep(older_than=timedelta(0)) == 0
    await dispatcher.dispatch(accepted.name)  # a late duplicate hand-off

    validate = await jetstream.pull_subscribe_bind(
        durable=consumer_name("validate", "interactive"), stream=WORK_STREAM
    )
    delivered = await validate.fetch(5, timeout=1)
    assert len(delivered) == 1, "the queue dropped the republish by its Nats-Msg-Id"
    again = await intake.submit(tenant, request)
    assert again.name == accepted.name and again.dispatched
