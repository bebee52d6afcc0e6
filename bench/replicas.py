"""A second replica of every stage (validator, assembler, signer, audit) beside
a running embedded stack, as Kubernetes would scale them: the same data
directory, NATS and databases, each replica on its own ports and instance
name (``quire.testing.replicas``). The bench runs its throughput phase again
with them, to show that two replicas on one machine do at least what one
does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from quire.stack.supervisor import Stack
from quire.testing.replicas import extra_process

__all__ = ["SCALED", "second_replicas"]

SCALED = ("validator", "assembler", "signer", "audit")


@asynccontextmanager
async def second_replicas(stack: Stack) -> AsyncIterator[dict[int, str]]:
    """A second replica of each scaled service, serving, until the block ends;
    yields each replica's pid and service."""
    async with AsyncExitStack() as replicas:
        pids = {}
        for service in SCALED:
            process = await replicas.enter_async_context(
                extra_process(stack, service, f"{service}-replica-2")
            )
            pids[process.pid] = service
        yield pids
