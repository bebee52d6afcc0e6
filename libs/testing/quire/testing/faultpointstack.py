"""A stack whose processes obey armed fault points, for tests that kill a stage.

Short leases bring a killed worker's job back in seconds, and the HTTP gateway
runs too. Several test files share one (``conftest.py``'s
``fault_point_stack``): a fault point fires once and is used up, each test
makes its own jobs, tenants and source systems, the stack restarts a service
a fault kills, and each file begins once the queues are quiet (``settle``),
so the tests need nothing of each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from quire.runtime import connect_nats
from quire.stack.info import StackInfo
from quire.stack.supervisor import Stack
from quire.testing.consumers import wait_quiet


@dataclass(frozen=True)
class FaultPointStack:
    stack: Stack
    info: StackInfo
    faults: Path
    """Where tests arm fault points (``quire.faults.arm``)."""
    credentials: Path
    """The validators' source-credentials directory (one token file per system)."""

    async def settle(self) -> None:
        """Wait until no job of an earlier test is still in the queues (a file
        that arms a fault point starts here, so only its own jobs can meet it)."""
        nc = await connect_nats(self.stack.nats_url, "quire-test-settle", **self.stack.nats_login())
        try:
            await wait_quiet(nc.jetstream(timeout=10))
        finally:
            await nc.close()


@contextmanager
def fault_point_stack(root: Path) -> Iterator[FaultPointStack]:
    """The stack, started under ``root`` and stopped on the way out."""
    (root / "credentials").mkdir(parents=True)
    stack = Stack(
        root / "stack",
        gateway=True,
        env={
            "QUIRE_FAULTS_DIR": str(root / "faults"),
            "QUIRE_ACK_WAIT_SECONDS": "2",
            "QUIRE_BACKOFF_BASE_SECONDS": "0.1",
            "QUIRE_DRAIN_SECONDS": "3",
            # Not hurried on a machine shared with other test runs.
            "QUIRE_VALIDATOR_BUDGET_BASE_SECONDS": "10",
            # A source system's breaker opens after 3 failures, for 2 s.
            "QUIRE_SOURCE_BREAKER_FAILURES": "3",
            "QUIRE_SOURCE_BREAKER_OPEN_SECONDS": "2",
            "QUIRE_JOB_BUDGET_RESERVE_SECONDS": "2",
            "QUIRE_SOURCE_CREDENTIALS_DIR": str(root / "credentials"),
        },
    )
    info = stack.start()
    try:
        yield FaultPointStack(stack, info, root / "faults", root / "credentials")
    finally:
        stack.stop()
