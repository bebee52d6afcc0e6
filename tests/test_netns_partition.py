"""A real partition (issue 42's first fault): three nats-server nodes, a
JetStream cluster with an R3 stream, each node in its own network namespace.
Cut one node from the other two while the test still reaches it: the
majority keeps acknowledging, the cut-off node acknowledges nothing, and
once healed every node holds every acknowledged message once (none lost,
none doubled). The cut-off node's publishes time out, and a timeout is an
unknown outcome: routes survive a blackhole, so the kernel may deliver one
to the leader after the heal; each is then stored at most once."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import ClusterInfo, StreamConfig
from nats.js.errors import BadRequestError

from quire.testing.netns import Network

pytestmark = pytest.mark.fault

ROOT = Path(__file__).resolve().parent.parent
NATS_SERVER = ROOT / ".venv" / "bin" / "nats-server"
CLIENT, ROUTE, MONITOR = 4222, 6222, 8222
NODES = ("n1", "n2", "n3")


def _config(network: Network, name: str, store: Path) -> str:
    node = network.nodes[name]
    routes = ", ".join(
        f"nats-route://{network.nodes[other].address}:{ROUTE}" for other in NODES if other != name
    )
    return "\n".join(
        [
            f"server_name: {name}",
            f"listen: 0.0.0.0:{CLIENT}",
            f"http: 0.0.0.0:{MONITOR}",
            f"jetstream {{ store_dir: {json.dumps(str(store))}, sync_interval: always }}",
            "cluster {",
            "  name: part",
            f"  listen: {node.address}:{ROUTE}",
            f"  routes: [{routes}]",
            "}",
        ]
    )


def _jsz(address: str) -> dict[str, object]:
    url = f"http://{address}:{MONITOR}/jsz?streams=true"
    with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - a test address
        found: dict[str, object] = json.load(reply)
        return found


def _until(check, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


async def _placed(js: nats.js.JetStreamContext, timeout: float = 60.0) -> None:
    """The R3 stream, made once the meta leader can place it: a cluster that
    just elected its leader may not yet know its peers' JetStream
    (``no suitable peers for placement``), and under load the request can
    outlast the client's timeout; making the same stream again is a no-op."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await js.add_stream(StreamConfig(name="PART", subjects=["part.>"], num_replicas=3))
            return
        except (BadRequestError, nats.errors.TimeoutError):
            assert time.monotonic() < deadline, "the cluster never placed the stream"
            await asyncio.sleep(0.5)


async def _stream_led(js: nats.js.JetStreamContext, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ((await js.stream_info("PART")).cluster or ClusterInfo()).leader:
        assert time.monotonic() < deadline, "the stream elected no leader"
        await asyncio.sleep(0.1)


async def _agreed_subjects(
    network: Network, js: nats.js.JetStreamContext, timeout: float = 60.0
) -> dict[str, int]:
    """The stream's messages by subject once every node holds as many as the
    leader says it has (bounded)."""
    deadline = time.monotonic() + timeout
    held: list[int] = []
    while time.monotonic() < deadline:
        info = await js.stream_info("PART", subjects_filter=">")
        try:
            held = [
                await asyncio.to_thread(_messages_on, network.nodes[n].address, "PART")
                for n in NODES
            ]
        except OSError:
            held = []
        if held and all(count == info.state.messages for count in held):
            return dict(info.state.subjects or {})
        await asyncio.sleep(0.3)
    raise AssertionError(f"the nodes never agreed: {held}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Network]:
    with Network() as network:
        processes = []
        try:
            for name in NODES:
                network.add(name)
            for name in NODES:
                config = tmp_path / f"{name}.conf"
                config.write_text(_config(network, name, tmp_path / name))
                log = (tmp_path / f"{name}.log").open("wb")
                processes.append(
                    network.run(name, [str(NATS_SERVER), "-c", str(config)], output=log)
                )
            _until(
                lambda: all(
                    (_jsz(network.nodes[n].address).get("meta_cluster") or {}).get("leader")  # type: ignore[union-attr]
                    for n in NODES
                )
            )
            yield network
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=20)


def _messages_on(address: str, stream: str) -> int:
    details = _jsz(address).get("account_details") or []
    for account in details:  # type: ignore[union-attr]
        for found in account.get("stream_detail") or []:
            if found["name"] == stream:
                return int(found["state"]["messages"])
    return -1


async def test_a_node_cut_from_its_peers_acknowledges_nothing_and_loses_nothing(
    cluster: Network,
) -> None:
    n1, n3 = cluster.nodes["n1"].address, cluster.nodes["n3"].address
    majority = await nats.connect(f"nats://{n1}:{CLIENT}", max_reconnect_attempts=-1)
    minority = await nats.connect(f"nats://{n3}:{CLIENT}", max_reconnect_attempts=-1)
    try:
        js = majority.jetstream()
        await _placed(js)
        # An R3 stream takes its publishes once its replicas elected a leader.
        await _stream_led(js)
        for index in range(10):
            await js.publish("part.before", str(index).encode(), timeout=5)

        cluster.partition("n3", "n1")
        cluster.partition("n3", "n2")
        acknowledged = 10
        for index in range(10):  # the majority elects a leader if it must, and goes on
            for _ in range(20):
                try:
                    await js.publish(
                        "part.during",
                        str(index).encode(),
                        timeout=2,
                        headers={"Nats-Msg-Id": f"d{index}"},
                    )
                    acknowledged += 1
                    break
                except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
                    await asyncio.sleep(0.5)
        assert acknowledged == 20, "the majority side acknowledges through the cut"
        cut_off = minority.jetstream()
        refused = 0
        for index in range(3):
            try:
                await cut_off.publish("part.minority", str(index).encode(), timeout=2)
            except (
                nats.errors.TimeoutError,
                nats.js.errors.NoStreamResponseError,
                nats.errors.NoRespondersError,
            ):
                refused += 1
        assert refused == 3, "a node without a quorum acknowledges nothing"

        cluster.heal()
        # A publish that timed out is an unknown outcome, not a refusal: the
        # blackhole leaves the cut node's route connections open, and the
        # kernel retransmits what they hold once healed, so the leader may
        # store a minority publish late. Every acknowledged message must be
        # there once; each timed-out one at most once; every node the same.
        subjects = await _agreed_subjects(cluster, js)
        print(f"stored after the heal: {subjects}")
        assert subjects["part.before"] == 10 and subjects["part.during"] == 10, subjects
        assert subjects.get("part.minority", 0) <= 3, subjects
    finally:
        await minority.close()
        await majority.close()
