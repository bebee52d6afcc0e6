"""``make bench``'s floor (``bench/floor.py``): the cost of one queue message on
a real nats-server configured as the stack's, and of one empty gRPC call to a
real server process, and the arithmetic that sets them against issue 14's
aims."""

from __future__ import annotations

import importlib
import math
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

from quire.stack.ports import free_port

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench_module(name: str) -> ModuleType:
    """A module of ``bench/`` (a folder of scripts, not a package), imported as
    its scripts import each other."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


HEALTH_SERVER = textwrap.dedent(
    """
    import asyncio, sys
    import grpc
    from grpc_health.v1 import health, health_pb2_grpc

    async def main():
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        server.add_insecure_port(sys.argv[1])
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())
    """
)


def test_a_queue_message_costs_the_server_and_the_client_something_and_is_removed() -> None:
    floor = _bench_module("floor")
    # It raises unless every message was acknowledged and left the work queue.
    measured = floor.messaging_floor(600, 580, 8)
    assert 0 < measured.server_ms < 20
    assert 0 < measured.client_ms < 20
    assert measured.total_ms == pytest.approx(measured.server_ms + measured.client_ms)


def test_an_empty_call_is_charged_to_the_server_process_and_to_the_caller() -> None:
    floor = _bench_module("floor")
    endpoint = f"127.0.0.1:{free_port()}"
    server = subprocess.Popen([sys.executable, "-c", HEALTH_SERVER, endpoint])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(tuple(endpoint.split(":")), timeout=0.5):  # type: ignore[arg-type]
                    break
            except OSError:
                assert time.monotonic() < deadline, "the health server did not start"
                time.sleep(0.05)
        measured = floor.rpc_floor(endpoint, server.pid, 800, 8)
    finally:
        server.kill()
        server.wait(timeout=10)
    assert 0 < measured.server_ms < 20
    assert 0 < measured.client_ms < 20


def test_the_floor_is_set_against_the_room_each_aim_leaves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _bench_module("pipeline_bench")
    floor = _bench_module("floor")
    bench.print_floor(
        bare_ms=12.2,
        total_ms=100.0,
        messages=12.0,
        message_bytes=581,
        message=floor.Floor(0.223, 0.113),
        call=floor.Floor(0.185, 0.124),
        wire_ms=1.42,
        cores=2,
    )
    out = capsys.readouterr().out
    # The sources ride in SubmitJob: 12 x 0.336 + 2 x 0.309 + 1.42 = 4.032 + 0.618 + 1.42
    assert "floor 6.07 ms CPU per job" in out
    # (3 - 1) x 12.2 and (1/0.35 - 1) x 12.2
    assert "CPU aim 2 x bare = 24.40 ms" in out
    assert "(1/0.35 - 1) x bare = 22.66 ms" in out
    # 2 cores / (12.2 + 6.07) ms and 2 / 12.2 ms
    assert "cannot pass 109.5 packets/s of the bare 163.9" in out


def test_the_durable_floor_keeps_sources_and_commits_in_a_process_of_its_own(
    tmp_path: Path,
) -> None:
    latencyfloor = _bench_module("latencyfloor")
    sizes = [3000, 5000]
    floor = latencyfloor.start_probe(tmp_path, 1.0, 20.0, sizes).result()
    assert len(floor.commit) >= 3 and len(floor.sources) >= 3
    assert all(0 < took < 5 for took in floor.commit + floor.sources)
    # Every chain committed, and the transactions reached the database.
    assert floor.commits == len(floor.commit) + len(floor.sources)
    with sqlite3.connect(tmp_path / "floor.db") as database:
        (committed,) = database.execute("SELECT v FROM floor").fetchone()
    assert committed == floor.commits
    # Each chain with sources kept every source as a file of its size, in place.
    kept = sorted((tmp_path / "blobs").iterdir())
    assert len(kept) == len(sizes) * len(floor.sources)
    assert not [path for path in kept if path.name.startswith(".tmp-")]
    assert sorted({path.stat().st_size for path in kept}) == sizes
    assert floor.blob_bytes == sum(sizes) * len(floor.sources)


def test_the_durable_floor_is_set_against_the_submit_aim(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _bench_module("pipeline_bench")
    latencyfloor = _bench_module("latencyfloor")
    idle = latencyfloor.DurableFloor(commit=[0.001] * 10, sources=[0.003] * 10)
    slow = latencyfloor.DurableFloor(
        commit=[0.002] * 99 + [0.030], sources=[0.004] * 98 + [0.014] * 2
    )
    submits = [0.020] * 99 + [0.050]
    assert bench.print_durable_floor(idle, slow, 25.0, submits, {"COMPLETED": 40}) == (
        pytest.approx(0.014)
    )
    out = capsys.readouterr().out
    # Two slow chains of a hundred: over the aim, but not surely.
    assert "14.0 ms (100 chains, at least 4.0 ms with 95% confidence)" in out
    assert "the aim is below the floor's p99, but not with 95% confidence" in out
    assert "SubmitJob in that pass p50 20.0 ms, p99 20.0 ms, max 50.0 ms" in out
    assert "40 of its 40 jobs completed" in out
    quick = latencyfloor.DurableFloor(commit=[0.001] * 10, sources=[0.004] * 10)
    assert bench.print_durable_floor(
        idle, quick, 25.0, submits, {"COMPLETED": 39, "FAILED": 1}
    ) == (pytest.approx(0.004))
    out = capsys.readouterr().out
    assert "the aim leaves 6.0 ms for the call and the services' code" in out
    assert "39 of its 40 jobs completed" in out
    # Sources uploaded beforehand: a submit only commits, and only the commit counts.
    assert bench.print_durable_floor(
        idle, slow, 25.0, submits, {"COMPLETED": 40}, keeps_sources=False
    ) == pytest.approx(0.002)
    assert "the p99 of the commit under load, 2.0 ms (100 chains," in capsys.readouterr().out
    # Ten slow chains of a hundred: the p99 is over the aim with 95 % confidence.
    surely = latencyfloor.DurableFloor(commit=[0.001] * 100, sources=[0.004] * 90 + [0.020] * 10)
    assert bench.print_durable_floor(idle, surely, 25.0, submits, {}) == pytest.approx(0.020)
    out = capsys.readouterr().out
    assert "20.0 ms (100 chains, at least 20.0 ms with 95% confidence)" in out
    assert "SubmitJob as designed cannot meet it on this file system beside this stack" in out
    # No samples under load: no verdict, and nothing made up.
    empty = latencyfloor.DurableFloor()
    assert math.isnan(bench.print_durable_floor(idle, empty, 25.0, [], {}))
    assert "no verdict" in capsys.readouterr().out


def test_a_probe_that_dies_is_reported_at_once(tmp_path: Path) -> None:
    latencyfloor = _bench_module("latencyfloor")
    occupied = tmp_path / "a-file"
    occupied.write_text("not a folder")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start"):
        latencyfloor.start_probe(occupied, 1.0, 20.0, [1000])
    assert time.monotonic() - started < 30


def test_the_lower_bound_of_a_quantile_is_an_order_statistic_with_its_confidence() -> None:
    latencyfloor = _bench_module("latencyfloor")
    values = [float(index) for index in range(1, 150)]
    # Of 149 samples, the 145th smallest (the fifth largest) bounds the p99 from
    # below with 95 % confidence: P(Binomial(149, 0.99) >= 145) >= 0.95 > P(... >= 146).
    assert latencyfloor.lower_bound(values, 0.99, 0.95) == 145.0
    assert latencyfloor.lower_bound(list(reversed(values)), 0.99, 0.95) == 145.0
    assert latencyfloor.lower_bound(values, 0.99, 0.5) == 148.0
    assert latencyfloor.lower_bound([3.0] * 10, 0.99, 0.95) == 3.0
    assert latencyfloor.lower_bound([], 0.99, 0.95) is None


def test_each_packet_class_rewrites_its_own_section_of_the_document(tmp_path: Path) -> None:
    """``make bench`` writes the standard packet's figures and the lease
    class's into sections of their own: each run replaces its own section,
    never the other's, and a document without it is refused, not appended to."""
    costmodel = _bench_module("costmodel")
    standard, lease = costmodel.markers(), costmodel.markers("200-page packets")
    document = tmp_path / "performance.md"
    document.write_text(
        "\n".join(
            [
                "# Performance",
                standard[0],
                "old",
                standard[1],
                "between",
                lease[0],
                "old",
                lease[1],
                "after",
                "",
            ]
        )  # fmt: skip
    )
    costmodel.write_document(document, ["| lease |"], "lease run", "disk", label="200-page packets")
    costmodel.write_document(document, ["| standard |"], "standard run", "disk")
    text = document.read_text()
    assert text.count("| lease |") == 1 and text.count("| standard |") == 1
    assert "old" not in text
    standard_part = text[text.index(standard[0]) : text.index(standard[1])]
    lease_part = text[text.index(lease[0]) : text.index(lease[1])]
    assert "| standard |" in standard_part and "`standard run`" in standard_part
    assert "| lease |" in lease_part and "`lease run`" in lease_part
    assert text.startswith("# Performance\n") and "between" in text and text.endswith("after\n")
    document.write_text("# Performance\n" + standard[0] + "\n" + standard[1] + "\n")
    with pytest.raises(ValueError, match="no generated section"):
        costmodel.write_document(document, ["| lease |"], "run", "disk", label="200-page packets")


def test_the_lease_class_aims_at_a_larger_share_and_writes_its_own_section() -> None:
    """The packet class is read once, from ``BENCH_PAGES``, as the bench starts."""
    probe = "import pipeline_bench as b; print(b.LEASE_CLASS, b.AIM_SHARE, b.DOCUMENT_SECTION)"
    answers = {}
    for pages in ("4,5,3", "200", "7"):
        ran = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            cwd=BENCH,
            env={**os.environ, "BENCH_PAGES": pages},
            check=True,
            timeout=120,
        )
        answers[pages] = ran.stdout.strip()
    assert answers == {
        "4,5,3": "False 0.35",
        "200": "True 0.6 200-page packets",
        "7": "False 0.35 None",
    }


def test_an_open_loop_arrival_admission_refuses_is_counted_not_fatal() -> None:
    """When the stack falls behind the arrivals, admission refuses work with
    RESOURCE_EXHAUSTED: the pass counts the refusal (and its call's latency)
    and goes on; any other error still ends the run."""
    import asyncio

    import grpc

    from quire.pipeline import State
    from quire.type import job_pb2

    bench = _bench_module("pipeline_bench")

    def refusal(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
        return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "refused")

    class Client:
        def __init__(self, refused: set[int], code: grpc.StatusCode) -> None:
            self.calls = 0
            self.refused, self.code = refused, code

        async def submit(self, _items: object, inline: object = None) -> job_pb2.Job:
            self.calls += 1
            if self.calls in self.refused:
                raise refusal(self.code)
            return job_pb2.Job(name=f"jobs/{self.calls}")

        async def wait(self, name: str, timeout: float) -> job_pb2.Job:
            return job_pb2.Job(name=name, state=State.COMPLETED.number)

    packets = [bench.Packet(digests=["0" * 64], inline=[]) for _ in range(5)]
    client = Client({2, 4}, grpc.StatusCode.RESOURCE_EXHAUSTED)
    rpc, _late, outcomes, _drain = asyncio.run(bench.open_loop(client, packets, 1000.0))
    assert len(rpc) == 5
    assert outcomes == {State.COMPLETED: 3, bench.REFUSED: 2}
    failing = Client({3}, grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(grpc.aio.AioRpcError):
        asyncio.run(bench.open_loop(failing, packets, 1000.0))
