"""Completion notifications on the real stack: a tenant registers a callback
URL, and a receiver started here — unreachable at first, then failing its
first tries with a 500 and a hang — gets exactly one valid signed notification
per finished job, refuses a replayed or tampered one, while polling keeps
working; every try is listed by ListNotificationAttempts. Admission is killed
while notifications are pending and delivers them after its restart.

The stack runs with short backoff and timeouts (``QUIRE_NOTIFY_*``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from quire.admission.v1 import batch_pb2
from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.grpcstatus import details_of
from quire.jobs import state_name
from quire.notifysign import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    SignatureRejected,
    verify,
)
from quire.stack.ports import free_port
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.callbackreceiver import CallbackReceiver
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.type import job_pb2

pytestmark = pytest.mark.stack

NOTIFY_ENV = {
    "QUIRE_NOTIFY_BACKOFF_BASE_SECONDS": "0.2",
    "QUIRE_NOTIFY_BACKOFF_CAP_SECONDS": "0.8",
    "QUIRE_NOTIFY_TIMEOUT_SECONDS": "1",
    "QUIRE_NOTIFY_POLL_SECONDS": "0.1",
    "QUIRE_NOTIFY_MAX_ATTEMPTS": "40",
    "QUIRE_BATCH_FINISH_POLL_SECONDS": "0.2",
    "QUIRE_DRAIN_SECONDS": "5",
    # The operator's allow-list: this machine's receivers on 127.0.0.1, no other
    # private address (127.0.0.2 is loopback, and outside it).
    "QUIRE_EGRESS_ALLOW": "127.0.0.1/32",
}

INTERNAL_CALLBACKS = [
    "https://169.254.169.254/latest/meta-data/",  # the cloud metadata service
    "https://10.0.0.1/hook",
    "https://172.16.0.1/hook",
    "https://192.168.1.1/hook",
    "https://100.64.0.1/hook",  # shared address space
    "https://[fd00::1]/hook",  # unique-local
    "https://[fe80::1]/hook",  # link-local
    "https://[::ffff:169.254.169.254]/hook",  # the metadata service, mapped into IPv6
    "https://0.0.0.0/hook",
    "http://127.0.0.2:8222/varz",  # loopback outside the allow-list
]


@pytest.fixture(scope="module")
def notify_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own: short notification backoff, and admission may be killed."""
    running = Stack(tmp_path_factory.mktemp("notify-stack"), env=NOTIFY_ENV)
    running.start()
    yield running
    running.stop()


@pytest.fixture
async def tenant(notify_stack: Stack) -> AsyncIterator[AdmissionClient]:
    """A fresh tenant of ``notify_stack``."""
    info = StackInfo.read(notify_stack.data_dir)
    async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
        made = await admin.create_tenant(f"notify-{uuid.uuid4().hex[:8]}")
    async with AdmissionClient(info.endpoints["admission"], made.secret) as client:
        yield client


async def _submit_jobs(client: AdmissionClient, tmp_path: Path) -> dict[str, str]:
    """Three packets that complete and one that is rejected: job name -> expected state."""
    expected = {}
    for n in range(3):
        pdf = write_text_pdf(tmp_path / f"ok{n}.pdf", [f"notify {n} {uuid.uuid4().hex}"])
        digest = (await client.upload(pdf)).sha256
        expected[(await client.submit([PacketItem(f"ok{n}", digest)])).name] = "COMPLETED"
    whole = write_text_pdf(tmp_path / "whole.pdf", [f"cut {uuid.uuid4().hex}"] * 3).read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    digest = (await client.upload(cut)).sha256
    expected[(await client.submit([PacketItem("cut", digest)])).name] = "REJECTED"
    return expected


async def _attempts_until(client: AdmissionClient, names, done, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    """Each job's ListNotificationAttempts once ``done`` holds for all of them."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        replies = {}
        try:
            for name in names:
                replies[name] = await client.list_notification_attempts(name)
        except grpc.aio.AioRpcError as error:  # admission restarting
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        else:
            if all(done(reply) for reply in replies.values()):
                return replies
        assert asyncio.get_running_loop().time() < deadline, f"not yet: {replies}"
        await asyncio.sleep(0.2)


async def test_a_failing_receiver_gets_exactly_one_valid_signed_notification_per_finished_job(
    notify_stack: Stack, tenant: AdmissionClient, tmp_path: Path
) -> None:
    receiver = CallbackReceiver(free_port(), script=("error", "hang"), hang_seconds=2.5)
    registered = await tenant.set_notification_endpoint(receiver.url)
    receiver.secret = registered.secret
    assert registered.endpoint.url == receiver.url and len(receiver.secret) == 64

    expected = await _submit_jobs(tenant, tmp_path)
    for name, state in expected.items():  # polling works without the receiver
        job = await tenant.wait(name, timeout=90)
        assert state_name(job.state) == state
    # Nobody listens yet: every job's notification fails its first tries...
    await _attempts_until(tenant, expected, lambda r: len(r.attempts) >= 1)
    # ...and survives admission dying.
    restarts = notify_stack.restarts("admission")
    notify_stack.kill("admission")
    await asyncio.to_thread(notify_stack.wait_healthy)
    assert notify_stack.restarts("admission") > restarts

    receiver.start()
    try:
        listed = await _attempts_until(tenant, expected, lambda r: r.HasField("deliver_time"))
        await asyncio.sleep(2.0)  # time for any duplicate to arrive
        await _assert_replays_and_tampering_refused(receiver)
    finally:
        receiver.stop()

    by_job = {doc["name"]: (delivery, doc) for delivery, doc in receiver.accepted.items()}
    assert sorted(by_job) == sorted(expected), "exactly one accepted notification per job"
    for name, state in expected.items():
        delivery_id, document = by_job[name]
        job = await tenant.get_job(name)
        assert (document["state"], document["terminal"]) == (state, True)
        assert document["output_digest"] == (job.output_digest or None)
        if state == "REJECTED":
            assert document["failure_code"] == job.reason_code == "MALFORMED_PDF"
        assert receiver.verdicts(delivery_id)[:3] == ["error", "hang", "accepted"]
        # The tenant hears coarse outcomes: a 500, a hang and a closed port
        # alike are FAILED, and no receiver's status is passed on.
        outcomes = [(a.outcome, a.http_status) for a in listed[name].attempts]
        assert outcomes[0] == ("FAILED", 0)
        assert outcomes[-3:] == [("FAILED", 0), ("FAILED", 0), ("DELIVERED", 0)]
        numbers = [a.attempt for a in listed[name].attempts]
        assert numbers == sorted(set(numbers))
    assert (await tenant.get_job(next(iter(expected)))).state == job_pb2.JOB_STATE_COMPLETED


async def _assert_replays_and_tampering_refused(receiver: CallbackReceiver) -> None:
    accepted = next(r for r in receiver.received if r.verdict == "accepted")
    headers = {DELIVERY_HEADER: accepted.delivery_id, SIGNATURE_HEADER: accepted.signature}
    async with httpx.AsyncClient() as http:
        replayed = await http.post(receiver.url, content=accepted.body, headers=headers)
        tampered = await http.post(
            receiver.url, content=accepted.body.replace(b'"jobs/', b'"jobz/'), headers=headers
        )
    assert receiver.received[-2].verdict == "replay" and replayed.status_code == 200
    assert receiver.received[-1].verdict == "rejected" and tampered.status_code == 401
    with pytest.raises(SignatureRejected):
        verify(
            "0" * 64, accepted.body, delivery_id=accepted.delivery_id, signature=accepted.signature
        )


async def test_endpoint_secret_is_shown_once_sealed_at_rest_and_rotated(
    notify_stack: Stack, tenant: AdmissionClient
) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    first = await tenant.set_notification_endpoint(url, request_id="set-1")
    again = await tenant.set_notification_endpoint(url, request_id="set-1")
    assert len(first.secret) == 64 and not first.secret_withheld
    assert (again.secret, again.secret_withheld, again.endpoint.url) == ("", True, url)
    kept = await tenant.set_notification_endpoint(url + "/v2")
    assert (kept.secret, kept.secret_withheld) == ("", False)
    rotated = await tenant.set_notification_endpoint(url + "/v2", rotate_secret=True)
    assert len(rotated.secret) == 64 and rotated.secret != first.secret
    assert (await tenant.get_notification_endpoint()).url == url + "/v2"

    database = notify_stack.data_dir / "admission" / "admission.db"
    at_rest = b"".join(p.read_bytes() for p in database.parent.glob("admission.db*"))
    for secret in (first.secret, rotated.secret):
        assert secret.encode() not in at_rest

    removed = await tenant.set_notification_endpoint("")
    assert removed.endpoint.url == "" and removed.secret == ""
    assert (await tenant.get_notification_endpoint()).url == ""


async def _refused_url(tenant: AdmissionClient, url: str) -> grpc.aio.AioRpcError:
    """Registering ``url`` is INVALID_ARGUMENT, INVALID_NOTIFICATION_URL on ``url``."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await tenant.set_notification_endpoint(url)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = details_of(refused.value)
    assert details.reason == "INVALID_NOTIFICATION_URL"
    assert [v[0] for v in details.violations] == ["url"]
    return refused.value


@pytest.mark.parametrize(
    "url", ["http://hooks.example.com/q", "https://user:pw@hooks.example.com/q", "ftp://x/q"]
)
async def test_a_bad_callback_url_is_invalid_argument_on_url(
    tenant: AdmissionClient, url: str
) -> None:
    await _refused_url(tenant, url)


@pytest.mark.parametrize("url", INTERNAL_CALLBACKS)
async def test_a_callback_to_an_address_quire_does_not_call_is_refused(
    tenant: AdmissionClient, url: str
) -> None:
    refused = await _refused_url(tenant, url)
    assert "169.254" not in refused.details(), "no address is echoed"
    assert (await tenant.get_notification_endpoint()).url == ""


async def test_a_registered_callback_that_now_points_inside_is_not_called(
    notify_stack: Stack, tenant: AdmissionClient, tmp_path: Path
) -> None:
    """A registration made before the allow-list narrowed (written here into
    admission's table) reaches nothing: the notifier checks each connection,
    and the tenant sees REFUSED, not what the address answered."""
    inside = CallbackReceiver(free_port(), host="127.0.0.2").start()
    try:
        allowed = CallbackReceiver(free_port()).start()
        allowed.stop()
        await tenant.set_notification_endpoint(allowed.url)
        database = notify_stack.data_dir / "admission" / "admission.db"
        with contextlib.closing(sqlite3.connect(database, timeout=30)) as connection:
            with connection:
                changed = connection.execute(
                    "UPDATE notification_endpoints SET url = ? WHERE url = ?",
                    (inside.url, allowed.url),
                ).rowcount
        assert changed == 1
        pdf = write_text_pdf(tmp_path / "in.pdf", [f"inside {uuid.uuid4().hex}"])
        digest = (await tenant.upload(pdf)).sha256
        name = (await tenant.submit([PacketItem("in", digest)])).name
        listed = await _attempts_until(tenant, [name], lambda r: len(r.attempts) >= 2)
        outcomes = [(a.outcome, a.http_status) for a in listed[name].attempts]
        assert set(outcomes) == {("REFUSED", 0)}, outcomes
        assert not listed[name].HasField("deliver_time")
        assert inside.received == [], "the address inside was never called"
    finally:
        inside.stop()


async def test_another_tenants_job_has_no_attempts_to_show(
    notify_stack: Stack, tenant: AdmissionClient, tmp_path: Path
) -> None:
    pdf = write_text_pdf(tmp_path / "own.pdf", [f"own {uuid.uuid4().hex}"])
    job = await tenant.submit([PacketItem("own", (await tenant.upload(pdf)).sha256)])
    assert not (await tenant.list_notification_attempts(job.name)).attempts
    info = StackInfo.read(notify_stack.data_dir)
    async with AdmissionClient(info.endpoints["admission"], info.token()) as other:
        for subject in (job.name, "jobs/nonesuch", "batches/nonesuch", "tenants/x"):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await other.list_notification_attempts(subject)
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_finished_batch_and_each_of_its_jobs_are_notified_once(
    notify_stack: Stack, tenant: AdmissionClient, tmp_path: Path
) -> None:
    receiver = CallbackReceiver(free_port()).start()
    try:
        receiver.secret = (await tenant.set_notification_endpoint(receiver.url)).secret
        packets = []
        for n in range(2):
            pdf = write_text_pdf(tmp_path / f"b{n}.pdf", [f"batch {n} {uuid.uuid4().hex}"])
            digest = (await tenant.upload(pdf)).sha256
            manifest = job_pb2.Manifest(
                items=[job_pb2.ManifestItem(position=0, document_id=f"b{n}", sha256=digest)]
            )
            packets.append(batch_pb2.BatchPacket(bundle_id=f"unit-{n}", manifest=manifest))
        batch = await tenant.submit_batch(packets)
        await _attempts_until(tenant, [batch.name], lambda r: r.HasField("deliver_time"), 90)
        jobs = [child.job async for child in tenant.batch_jobs(batch.name)]
        await _attempts_until(tenant, jobs, lambda r: r.HasField("deliver_time"))
        await asyncio.sleep(1.0)  # time for any duplicate to arrive
    finally:
        receiver.stop()
    documents = sorted(receiver.accepted.values(), key=lambda d: d["name"])
    assert [d["name"] for d in documents] == sorted([batch.name, *jobs])
    by_name = {d["name"]: d for d in documents}
    assert by_name[batch.name]["state"] == "DONE"
    assert by_name[batch.name]["terminal_count"] == 2
    assert by_name[batch.name]["job_counts"] == [{"state": "COMPLETED", "count": 2}]
    assert {by_name[job]["bundle_id"] for job in jobs} == {"unit-0", "unit-1"}
    assert {by_name[job]["batch"] for job in jobs} == {batch.name}
    assert [r.verdict for r in receiver.received] == ["accepted"] * 3
    # The receiver's path and query (its token) reach no log line: the HTTP
    # client's own request lines are quieted (quire.logs.QUIET_LOGGERS).
    logged = (notify_stack.data_dir / "logs" / "admission.log").read_text()
    assert "HTTP Request" not in logged
    assert "/hooks/quire" not in logged and "receiver-side" not in logged


async def test_quire_notifications_sets_shows_and_lists_from_the_command_line(
    notify_stack: Stack,
) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"

    def quire(*args: str):  # type: ignore[no-untyped-def]
        return asyncio.to_thread(run_quire, notify_stack.data_dir, *args)

    made = await quire("notifications", "set", url, "--json")
    assert made.returncode == 0, made.stderr
    assert len(json.loads(made.stdout)["secret"]) == 64
    shown = await quire("notifications", "show")
    assert shown.returncode == 0 and shown.stdout.strip() == url
    unknown = await quire("notifications", "attempts", "nonesuch")
    assert unknown.returncode != 0 and "NOT_FOUND" in unknown.stderr + unknown.stdout
    removed = await quire("notifications", "set", "")
    assert removed.returncode == 0 and "no notification endpoint" in removed.stdout
