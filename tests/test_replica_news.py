"""Audit replicas tell each other whose history grew, so a watch or a waiting
completion on one wakes when another appends; a replica ignores its own news,
and one turn's jobs travel in one message."""

from __future__ import annotations

import asyncio

from quire.audit.replicanews import NEWS_SUBJECT, ReplicaNews
from quire.runtime import connect_nats
from quire.stack.natsserver import NatsServer


async def test_one_replicas_appends_wake_the_others(nats_server: NatsServer) -> None:
    first_nc = await connect_nats(nats_server.url, "audit-a")
    second_nc = await connect_nats(nats_server.url, "audit-b")
    heard: dict[str, list[str]] = {"a": [], "b": []}
    messages: list[bytes] = []
    try:
        first = ReplicaNews(first_nc, "audit-a", heard["a"].append)
        second = ReplicaNews(second_nc, "audit-b", heard["b"].append)
        await first.start()
        await second.start()

        async def count(msg):  # type: ignore[no-untyped-def]
            messages.append(msg.data)

        await second_nc.subscribe(NEWS_SUBJECT, cb=count)
        await second_nc.flush()
        first.grew("jobs/one")
        first.grew("jobs/two")
        first.grew("jobs/one")
        for _ in range(100):
            if len(heard["b"]) >= 2:
                break
            await asyncio.sleep(0.02)
        assert sorted(heard["b"]) == ["jobs/one", "jobs/two"]
        assert heard["a"] == [], "a replica does not wake itself twice"
        assert len(messages) == 1, "one turn's jobs in one message"
    finally:
        await first_nc.close()
        await second_nc.close()
