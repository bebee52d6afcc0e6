"""Versions on every step (issue 20, docs/rollouts.md): the deployable version
(``QUIRE_BUILD_VERSION``) is the actor's ``build_version`` on every ledger
entry; every service process announces itself in the ``quire_workers``
bucket (service, instance, version, the rulesets it can run), refreshed by a
heartbeat, deleted on a clean shutdown and expiring when the process dies;
``quire workers`` lists them by service and version."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import KeyNotFoundError

from quire.announcements import (
    WORKERS_BUCKET,
    Announcement,
    Announcer,
    instance_key,
    read_announcements,
    worker_key,
)
from quire.cli.workers import groups
from quire.client import AdmissionClient, PacketItem
from quire.errors import InvalidSetting
from quire.jobs import state_name
from quire.natsauth import SERVICE_PERMISSIONS
from quire.runtime import connect_nats
from quire.settings import BUILD_VERSION, SERVICES, QueueSettings, ServiceSettings
from quire.stack.natsserver import NatsServer
from quire.stack.supervisor import Stack
from quire.testing.ledger import ledger_entries
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.workqueue.topology import TOPOLOGY_STREAMS, ensure_topology

VERSION = "2026.12.1-rc1"


# -- the setting ------------------------------------------------------------------


def test_the_build_version_is_the_setting_or_the_distributions() -> None:
    assert ServiceSettings.from_env("validator", {}).build_version == BUILD_VERSION
    chosen = ServiceSettings.from_env("signer", {"QUIRE_BUILD_VERSION": VERSION})
    assert chosen.build_version == VERSION
    longest = "a" * 64
    assert ServiceSettings.from_env("audit", {"QUIRE_BUILD_VERSION": longest}).build_version == (
        longest
    )


@pytest.mark.parametrize("value", ["1.0 beta", "v1/2", "a" * 65, "é1", "1;rm"])
def test_a_build_version_outside_the_alphabet_or_too_long_is_refused(value: str) -> None:
    with pytest.raises(InvalidSetting) as raised:
        ServiceSettings.from_env("validator", {"QUIRE_BUILD_VERSION": value})
    assert raised.value.variable == "QUIRE_BUILD_VERSION"
    assert value not in raised.value.message


def test_a_service_started_with_an_invalid_build_version_stops_and_says_why(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "quire.validator.main"],
        env={
            **os.environ,
            "QUIRE_DATA_DIR": str(tmp_path),
            "QUIRE_NATS_URL": "nats://127.0.0.1:9",
            "QUIRE_BUILD_VERSION": "2026.12 rc1",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "quire-validator: cannot start: QUIRE_BUILD_VERSION: " in done.stderr
    assert "Traceback" not in done.stderr


# -- keys, permissions, listing (no stack) ------------------------------------------


def test_an_instance_is_one_token_of_a_kv_key() -> None:
    assert instance_key("node-7.example.com-4242") == "node-7_example_com-4242"
    assert instance_key("pod/quire validator*") == "pod_quire_validator_"
    assert instance_key("") == "_"
    assert len(instance_key("x" * 500)) == 128
    assert worker_key("validator", "a.b") == "validator.a_b"


def test_each_service_may_write_only_its_own_announcements() -> None:
    assert f"KV_{WORKERS_BUCKET}" in TOPOLOGY_STREAMS
    for service in SERVICES:
        mine = [s for s in SERVICE_PERMISSIONS[service].publish if WORKERS_BUCKET in s]
        assert mine == [f"$KV.{WORKERS_BUCKET}.{service}.>"], service


def test_the_listing_groups_by_service_version_track_and_rulesets() -> None:
    def entry(service: str, instance: str, version: str, rulesets: list[str]) -> Announcement:
        return Announcement(service, instance, version, rulesets, "baseline", "", "")

    found = groups(
        [
            entry("validator", "b", "2", ["default@1"]),
            entry("validator", "a", "2", ["default@1"]),
            entry("validator", "c", "3", ["default@1", "default@2"]),
            entry("assembler", "d", "2", []),
        ]
    )
    assert [(g.service, g.build_version, [e.instance for e in g.instances]) for g in found] == [
        ("assembler", "2", ["d"]),
        ("validator", "2", ["a", "b"]),
        ("validator", "3", ["c"]),
    ]


# -- the announcer on a real NATS -----------------------------------------------------


async def test_an_announcer_puts_refreshes_and_deletes_its_entry(
    nats_server: NatsServer,
) -> None:
    nc = await connect_nats(nats_server.url, "quire-test-announcer")
    try:
        js = nc.jetstream(timeout=10)
        # A 6 s time-to-live: long enough that the entry is surely read before it
        # expires on a busy machine (at 1.5 s it once was not), short enough to wait.
        queue = QueueSettings(worker_heartbeat_seconds=2.0)
        await ensure_topology(js, queue)
        kv = await js.key_value(WORKERS_BUCKET)
        rulesets = ["default@1"]
        announcer = Announcer(
            js,
            service="validator",
            instance="host.one-1",
            build_version=VERSION,
            heartbeat_seconds=0.5,
            rulesets=lambda: rulesets,
        )
        await announcer.start()
        first = Announcement.from_json((await kv.get("validator.host_one-1")).value or b"")
        assert (first.service, first.instance, first.build_version, first.track) == (
            "validator",
            "host.one-1",
            VERSION,
            "baseline",
        )
        assert first.rulesets == ["default@1"] and first.started_at and first.heartbeat_at
        rulesets.append("default@2")  # published since: the next heartbeat says so
        deadline = time.monotonic() + 10
        while True:
            later = Announcement.from_json((await kv.get(announcer.key)).value or b"")
            if later.heartbeat_at != first.heartbeat_at:
                break
            assert time.monotonic() < deadline, "no heartbeat"
            await asyncio.sleep(0.1)
        assert later.started_at == first.started_at
        assert later.rulesets == ["default@1", "default@2"]
        assert [a.instance for a in await read_announcements(js)] == ["host.one-1"]
        await announcer.stop()  # a clean shutdown: gone at once, not at expiry
        with pytest.raises(KeyNotFoundError):
            await kv.get(announcer.key)
        assert await read_announcements(js) == []
    finally:
        await nc.close()


async def test_the_entry_of_a_process_that_stops_beating_expires(
    nats_server: NatsServer,
) -> None:
    nc = await connect_nats(nats_server.url, "quire-test-expiry")
    try:
        js = nc.jetstream(timeout=10)
        await ensure_topology(js, QueueSettings())  # the default: 30 s
        # A 6 s time-to-live: long enough that the entry is surely read before it
        # expires on a busy machine (at 1.5 s it once was not), short enough to wait.
        queue = QueueSettings(worker_heartbeat_seconds=2.0)
        await ensure_topology(js, queue)  # provisioning again applies the new time-to-live
        info = await js.stream_info(f"KV_{WORKERS_BUCKET}")
        assert info.config.max_age == pytest.approx(queue.worker_ttl_seconds)
        announcer = Announcer(
            js, service="signer", instance="dead", build_version=VERSION, heartbeat_seconds=60
        )
        await announcer.start()  # one put, then (as far as the bucket knows) it died
        # Listed once the bucket's key listing sees it (its own consumer, which
        # a loaded machine can start late).
        listed = time.monotonic() + 10
        while [a.instance for a in await read_announcements(js)] != ["dead"]:
            assert time.monotonic() < listed, "the entry was never listed"
            await asyncio.sleep(0.1)
        deadline = time.monotonic() + queue.worker_ttl_seconds + 10
        while await read_announcements(js):
            assert time.monotonic() < deadline, "the entry outlived its time-to-live"
            await asyncio.sleep(0.2)
    finally:
        await nc.close()


# -- the whole stack ----------------------------------------------------------------


def _workers(data_dir: Path) -> list[dict[str, Any]]:
    listed = run_quire(data_dir, "workers", "--json")
    assert listed.returncode == 0, listed.stderr
    workers: list[dict[str, Any]] = json.loads(listed.stdout)["workers"]
    return workers


@pytest.mark.stack
async def test_a_stack_at_a_version_writes_it_on_every_step_and_announces_it(
    tmp_path: Path,
) -> None:
    stack = Stack(
        tmp_path / "stack",
        env={
            "QUIRE_BUILD_VERSION": VERSION,
            "QUIRE_WORKER_HEARTBEAT_SECONDS": "1",
            "QUIRE_DRAIN_SECONDS": "5",
        },
    )
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "a.pdf", ["versioned"]))).sha256
            job = await client.wait(
                (await client.submit([PacketItem("a", digest)])).name, timeout=90
            )
        assert state_name(job.state) == "COMPLETED"
        entries = await ledger_entries(stack.data_dir, job.name)
        actors = {(e.event.actor.service, e.event.actor.build_version) for e in entries}
        assert {service for service, _ in actors} >= set(SERVICES), actors
        assert {version for _, version in actors} == {VERSION}, actors

        # quire workers: every service, at that version; the validator's rulesets.
        # Both listings at once: each is a Python process started.
        workers, text = await asyncio.gather(
            asyncio.to_thread(_workers, stack.data_dir),
            asyncio.to_thread(run_quire, stack.data_dir, "workers"),
        )
        by_service = {w["service"]: w for w in workers}
        assert set(by_service) == set(SERVICES), workers
        assert {w["build_version"] for w in workers} == {VERSION}
        assert all(len(w["instances"]) == 1 and w["track"] == "baseline" for w in workers)
        assert "default@1" in by_service["validator"]["rulesets"]
        assert by_service["signer"]["rulesets"] == []
        assert all(w["heartbeat_age_seconds"] < 10 for w in workers), workers
        assert text.returncode == 0 and VERSION in text.stdout and "default@1" in text.stdout

        # A killed validator's entry expires (3 heartbeats); its restart announces
        # itself. Watched in the bucket ``quire workers`` lists (no process per look).
        old = by_service["validator"]["instances"][0]["instance"]
        stack.kill("validator")
        operator = await connect_nats(stack.nats_url, "quire-test-watch", **stack.nats_login())
        try:
            js = operator.jetstream(timeout=5)
            deadline = time.monotonic() + 60
            while True:
                now = {a.instance for a in await read_announcements(js) if a.service == "validator"}
                if now and old not in now:
                    break
                assert time.monotonic() < deadline, f"validator entries still {now}"
                await asyncio.sleep(0.2)
        finally:
            await operator.close()
        assert len(now) == 1, now

        # No service may announce in another's name (least privilege, invariant 11).
        login = stack.nats_login("validator")
        nc = await connect_nats(stack.nats_url, "quire-test-forger", **login)
        try:
            kv = await nc.jetstream(timeout=5).key_value(WORKERS_BUCKET)
            with pytest.raises(Exception):  # noqa: B017,PT011 - a permissions violation
                await kv.put("signer.forged", b"{}")
            await kv.put("validator.own-test", b"{}")  # its own name it may use
            await kv.delete("validator.own-test")
        finally:
            await nc.close()
    finally:
        await asyncio.to_thread(stack.stop)
