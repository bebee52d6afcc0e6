"""One more process of a stage beside a running embedded stack, for tests
that need two builds of a service at once (rollouts, schema compatibility):
its own loopback ports, its own instance name and log, the stack's
environment with the caller's additions, stopped when the block ends."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from quire.announcements import read_announcements
from quire.runtime import connect_nats
from quire.settings import service_address_var, service_health_var, service_metrics_var
from quire.stack.ports import free_port
from quire.stack.supervisor import Stack
from quire.testing.multinode import wait_healthy
from quire.workqueue.topology import WORK_STREAM, candidate_consumer_name

__all__ = ["candidate_consumer", "extra_process", "wait_serving"]


@asynccontextmanager
async def extra_process(
    stack: Stack,
    service: str,
    instance: str,
    env: Mapping[str, str] | None = None,
    *,
    address: str = "",
    drop: tuple[str, ...] = (),
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``service``'s main as process ``instance`` (``QUIRE_INSTANCE``), serving
    gRPC on ``address`` (a fresh loopback port unless given); ``drop`` names
    variables of the stack's environment to leave out. Fails with the end of
    its log if it never reports healthy."""
    health = f"127.0.0.1:{free_port()}"
    environment = {
        **stack.service_env(),
        service_address_var(service): address or f"127.0.0.1:{free_port()}",
        service_health_var(service): health,
        service_metrics_var(service): f"127.0.0.1:{free_port()}",
        "QUIRE_INSTANCE": instance,
    }
    for name in drop:
        environment.pop(name, None)
    environment.update(env or {})
    log_path = stack.data_dir / "logs" / f"{instance}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", f"quire.{service}.main"],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        try:
            await asyncio.to_thread(wait_healthy, health, process, instance)
        except (RuntimeError, TimeoutError) as error:
            tail = log_path.read_text(errors="replace")[-4000:]
            raise AssertionError(
                f"{instance} did not serve ({error}); its log ends:\n{tail}"
            ) from None
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()


async def wait_serving(stack: Stack, instance: str, track: str, timeout: float = 30.0) -> None:
    """Until ``instance`` announces that it serves ``track`` (it has bound
    its queues by its stage's rollout)."""
    nc = await connect_nats(stack.nats_url, f"quire-test-{instance}", **stack.nats_login())
    found: dict[str, str] = {}
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        while asyncio.get_running_loop().time() < deadline:
            found = {a.instance: a.track for a in await read_announcements(nc.jetstream())}
            if found.get(instance) == track:
                return
            await asyncio.sleep(0.2)
    finally:
        await nc.close()
    raise AssertionError(f"{instance} never served the {track} track: {found}")


async def candidate_consumer(stack: Stack, stage: str) -> tuple[int, int]:
    """(max_ack_pending, messages not yet acknowledged) of ``stage``'s
    candidate consumer: the rollout's cap, and its work waiting or in hand."""
    nc = await connect_nats(stack.nats_url, "quire-test-candidate", **stack.nats_login())
    try:
        info = await nc.jetstream().consumer_info(WORK_STREAM, candidate_consumer_name(stage))
    finally:
        await nc.close()
    return int(info.config.max_ack_pending or 0), int(
        (info.num_pending or 0) + (info.num_ack_pending or 0)
    )
