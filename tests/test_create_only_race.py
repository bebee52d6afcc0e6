"""Create-only entries (the key ring's data keys, the job gate's claims) on
a replicated stream, as a cluster runs them: writers racing for one subject
get one winner, and every loser is told the subject is taken. On a
three-node cluster JetStream answers a loser whose rival's write is still
in flight with its own code (10164, "wrong last sequence" without one);
taken for an error, two admission replicas taking the first uploads of a
new tenant failed one with INTERNAL (issue 42's partition runs found it)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from quire.runtime import connect_nats
from quire.stack.natscluster import NatsCluster
from quire.streamsafety import create_entry_at, create_only_stream

WRITERS = 4
ROUNDS = 5
LEADER_SECONDS = 30.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    members = NatsCluster(tmp_path / "cluster")
    members.start()
    try:
        yield members
    finally:
        members.stop()


async def _led(js: JetStreamContext, stream: str) -> None:
    """Until the new stream's replicas have elected a leader: before that a
    write has no responder (a busy machine takes seconds to elect one), which
    is not the race this test is about."""
    deadline = asyncio.get_running_loop().time() + LEADER_SECONDS
    while True:
        info = await js.stream_info(stream)
        if info.cluster is not None and info.cluster.leader:
            return
        assert asyncio.get_running_loop().time() < deadline, "no leader elected"
        await asyncio.sleep(0.1)


async def test_racing_writers_on_a_replicated_stream_get_one_winner_and_no_error(
    cluster: NatsCluster,
) -> None:
    nc = await connect_nats(cluster.url, "quire-test")
    try:
        js = nc.jetstream(timeout=30)
        await js.add_stream(create_only_stream("RACE", ["race.>"], 3))
        await _led(js, "RACE")
        for round_ in range(ROUNDS):
            subject = f"race.{round_}"
            answers = await asyncio.gather(
                *(create_entry_at(js, subject, f"writer {w}".encode()) for w in range(WRITERS))
            )
            won = [(w, seq) for w, seq in enumerate(answers) if seq is not None]
            assert len(won) == 1, answers
            ((winner, sequence),) = won
            stored = await js.get_msg("RACE", subject=subject)
            assert stored.seq == sequence and stored.data == f"writer {winner}".encode()
        assert (await create_entry_at(js, "race.0", b"late")) is None, "taken stays taken"
    finally:
        await nc.close()
