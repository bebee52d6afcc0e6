"""A second replica of every stage (validator, assembler, signer, audit) beside
a running embedded stack, as Kubernetes would scale them: the same data
directory, NATS and databases, each replica on its own ports and instance
name. The bench runs its throughput phase again with them, to show that two
replicas on one machine do at least what one does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from quire.settings import service_address_var, service_health_var, service_metrics_var
from quire.stack.ports import free_port
from quire.stack.supervisor import Stack
from quire.testing.multinode import wait_healthy

__all__ = ["SCALED", "second_replicas"]

SCALED = ("validator", "assembler", "signer", "audit")


@contextmanager
def second_replicas(stack: Stack, logs: Path) -> Iterator[dict[int, str]]:
    """Start a second replica of each scaled service, wait until each serves,
    and stop them when the block ends; yields their pids by service."""
    logs.mkdir(parents=True, exist_ok=True)
    env = stack.service_env()
    started: list[tuple[subprocess.Popen[bytes], str, str]] = []
    try:
        for service in SCALED:
            health = f"127.0.0.1:{free_port()}"
            replica_env = {
                **env,
                service_address_var(service): f"127.0.0.1:{free_port()}",
                service_health_var(service): health,
                service_metrics_var(service): f"127.0.0.1:{free_port()}",
                "QUIRE_INSTANCE": f"{service}-replica-2",
            }
            with open(logs / f"{service}-replica-2.log", "ab") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", f"quire.{service}.main"],
                    env=replica_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            started.append((process, health, service))
        for process, health, service in started:
            wait_healthy(health, process, f"a second {service}")
        yield {process.pid: service for process, _health, service in started}
    finally:
        for process, _health, _service in started:
            process.terminate()
        for process, _health, _service in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
