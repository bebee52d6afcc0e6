"""A throwaway PostgreSQL server from the machine's own installation, for tests
that must run against the real thing rather than SQLite.

Runs as the ``postgres`` system user when started by root (PostgreSQL refuses
to run as root), listens on loopback only, and keeps everything in one
directory that is removed when the server stops.

A test cluster may place it in a network namespace of its own
(``quire.stack.placement``): it then listens on that namespace's private
address and trusts connections from ``clients`` (the namespaces' subnet).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from pathlib import Path

from quire.stack.placement import LOOPBACK, Placement

__all__ = ["PostgresServer", "postgres_binaries"]

READY_TIMEOUT_SECONDS = 30.0


def postgres_binaries() -> Path | None:
    """The newest installed PostgreSQL ``bin`` directory, if any."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
    )
    for candidate in reversed(candidates):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    return None


class PostgresServer:
    def __init__(
        self,
        directory: Path,
        *,
        port: int,
        binaries: Path,
        placement: Placement = LOOPBACK,
        clients: str = "",
    ) -> None:
        self.directory = directory
        self.port = port
        self.placement = placement
        self.clients = clients
        """A CIDR whose connections are trusted besides loopback's ("" for none)."""
        self._bin = binaries
        self._as_root = os.geteuid() == 0

    @property
    def host(self) -> str:
        return self.placement.host

    def _run(self, *args: str, placed: bool = False) -> None:
        """Run a PostgreSQL tool (``placed``: in the server's namespace)."""
        command = list(args)
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        if placed:
            command = self.placement.command(command)
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            shutil.chown(self.directory, "postgres", "postgres")
        data = self.directory / "data"
        self._run(
            str(self._bin / "initdb"), "-D", str(data), "-U", "quire", "--auth=trust", "-E", "UTF8"
        )
        if self.clients:
            with open(data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {self.clients} trust\n")
        self._launch()

    def _launch(self) -> None:
        data = self.directory / "data"
        options = f"-p {self.port} -k {self.directory} -c listen_addresses={self.host} -c fsync=on"
        self._run(
            str(self._bin / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(self.directory / "log"),
            "-w",
            "start",
            placed=True,
        )
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            try:
                self._run(str(self._bin / "pg_isready"), "-h", self.host, "-p", str(self.port))
                return
            except subprocess.CalledProcessError:
                time.sleep(0.1)
        raise TimeoutError("PostgreSQL did not become ready")

    def control(self, mode: str) -> None:
        """Shut the server down (``mode``: ``fast``, or ``immediate`` as a
        crash would), keeping its data; ``restart`` runs it again."""
        self._run(
            str(self._bin / "pg_ctl"), "-D", str(self.directory / "data"), "-m", mode, "-w", "stop"
        )

    def restart(self) -> None:
        """Run the server again on its data, port and address."""
        self._launch()

    def create_database(self, name: str) -> str:
        """Create a database and return its SQLAlchemy URL."""
        self._run(
            str(self._bin / "createdb"),
            "-h",
            self.host,
            "-p",
            str(self.port),
            "-U",
            "quire",
            name,
        )
        return f"postgresql+psycopg://quire@{self.host}:{self.port}/{name}"

    def stop(self) -> None:
        data = self.directory / "data"
        if data.exists():
            self._run(str(self._bin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)
