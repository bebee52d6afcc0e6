"""Audit replicas tell each other whose history grew, so a watch or a waiting
completion on one wakes when another appends; a replica ignores its own news,
one turn's jobs travel in one message, and a replica that hears no other
sends no news at all."""

from __future__ import annotations

import asyncio

from quire.audit.replicanews import NEWS_SUBJECT, ReplicaNews
from quire.runtime import connect_nats
from quire.stack.natsserver import NatsServer


def _with_jobs(messages: list[bytes]):  # type: ignore[no-untyped-def]
    """A subscriber's callback keeping the news that names jobs (not presence)."""

    async def keep(msg):  # type: ignore[no-untyped-def]
        if b"\n" in msg.data:
            messages.append(msg.data)

    return keep


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

        await second_nc.subscribe(NEWS_SUBJECT, cb=_with_jobs(messages))
        await second_nc.flush()
        for _ in range(100):  # each has said it is there
            if not first.alone and not second.alone:
                break
            await asyncio.sleep(0.02)
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
        first.close()
        second.close()
        await first_nc.close()
        await second_nc.close()


async def test_a_lone_replica_sends_no_news_until_another_starts(nats_server: NatsServer) -> None:
    first_nc = await connect_nats(nats_server.url, "audit-a")
    second_nc = await connect_nats(nats_server.url, "audit-b")
    messages: list[bytes] = []
    heard: list[str] = []
    first = ReplicaNews(first_nc, "audit-a", lambda job: None)
    second = ReplicaNews(second_nc, "audit-b", heard.append)
    try:
        await second_nc.subscribe(NEWS_SUBJECT, cb=_with_jobs(messages))
        await second_nc.flush()
        await first.start()
        await first_nc.flush()
        assert first.alone
        first.grew("jobs/unheard")
        await asyncio.sleep(0.2)
        assert messages == [], "no one listens: nothing is sent"
        await second.start()  # says it is there; the first answers in kind
        for _ in range(100):
            if not first.alone and not second.alone:
                break
            await asyncio.sleep(0.02)
        assert not first.alone and not second.alone
        first.grew("jobs/heard")
        for _ in range(100):
            if heard:
                break
            await asyncio.sleep(0.02)
        assert heard == ["jobs/heard"]
    finally:
        first.close()
        second.close()
        await first_nc.close()
        await second_nc.close()


async def test_a_replica_connected_as_services_connect_is_not_sent_its_own_news(
    nats_server: NatsServer,
) -> None:
    # Services connect with echo off (quire.runtime.start_runtime): a
    # replica's news goes to the others only, not back to itself as well.
    first_nc = await connect_nats(nats_server.url, "audit-a", echo=False)
    second_nc = await connect_nats(nats_server.url, "audit-b", echo=False)
    own: list[bytes] = []
    theirs: list[bytes] = []
    first = ReplicaNews(first_nc, "audit-a", lambda job: None)
    second = ReplicaNews(second_nc, "audit-b", lambda job: None)
    try:
        await first_nc.subscribe(NEWS_SUBJECT, cb=_with_jobs(own))
        await second_nc.subscribe(NEWS_SUBJECT, cb=_with_jobs(theirs))
        await first.start()
        await second.start()
        for _ in range(100):
            if not first.alone:
                break
            await asyncio.sleep(0.02)
        first.grew("jobs/told")
        for _ in range(100):
            if theirs:
                break
            await asyncio.sleep(0.02)
        await first_nc.flush()
        await asyncio.sleep(0.1)
        assert theirs and b"jobs/told" in theirs[0]
        assert own == [], "the sender's own connection is not sent its news"
    finally:
        first.close()
        second.close()
        await first_nc.close()
        await second_nc.close()
