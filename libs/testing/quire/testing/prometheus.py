"""A real Prometheus (Debian's ``prometheus`` package) for tests: scrapes an
embedded stack with the configuration ``quire up`` writes, evaluates the
alert rules, and answers through its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from quire.stack.ports import free_port
from quire.stack.scrapeconfig import write_scrape_config

__all__ = ["Prometheus", "PROMETHEUS"]

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


class Prometheus:
    def __init__(
        self,
        directory: Path,
        metrics_endpoints: dict[str, str],
        *,
        rule_files: tuple[Path, ...] = (),
        interval_seconds: float = 1.0,
    ) -> None:
        self._directory = directory
        self.port = free_port()
        self._config = write_scrape_config(
            directory / "prometheus.yml",
            metrics_endpoints,
            interval_seconds=interval_seconds,
            rule_files=[str(path) for path in rule_files],
        )
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> Prometheus:
        if not Path(PROMETHEUS).exists():
            raise RuntimeError("prometheus is not installed: run `make system-deps`")
        log = open(self._directory / "prometheus.log", "wb")  # noqa: SIM115 - the child's
        self._process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self._config}",
                f"--storage.tsdb.path={self._directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("prometheus did not start; see prometheus.log")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector ``expression`` evaluates to now."""
        return self.api("query", query=expression)["result"]  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
