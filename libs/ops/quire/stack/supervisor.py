"""``quire up``: the embedded stack as separate processes on one machine.

At first start it generates each service's identity key pair
(``identity/``) and NATS password (``credentials/nats/``); nats-server then
runs with one user per service under least-privilege permissions and refuses
anonymous connections, and the stack lays out the streams once with the
operator user, which no service holds.

Starts nats-server (unless ``QUIRE_NATS_URL`` names one), then the five
services, forked from a zygote that has imported their code once
(``quire.stack.zygote``; the supervisor itself imports none of it: each
service runs from its own distribution, which must be installed beside the
operator tools, as ``pip install quire`` does), each on a free loopback port (and one more for its plaintext
health port); waits until every service reports SERVING on its health port;
writes ``stack.json`` (endpoints and where the development token is) into the
data directory; restarts a service that dies; and on stop sends SIGTERM so
each drains, then stops nats-server.

A service that refuses its configuration (exit status 2,
``quire.runtime.CONFIGURATION_REFUSED``: a setting it cannot use, a
published ruleset changed in place) is not started again: the same
configuration would be refused again. Its one line stays the last word in
its log; at startup ``start`` raises ``ConfigurationRefused`` with it
(``quire.stack.refusals``).

It supervises its own nats-server too: one that dies is started again on
the same port, store directory, config and logins, at once the first time
and after a doubling pause (at most ``NATS_BACKOFF_CAP_SECONDS``) while it
keeps dying within ``NATS_STABLE_SECONDS`` of its start. The services are
not restarted for it: their clients reconnect (``quire.runtime``) and their
pull loops pull again (``quire.workqueue.worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
from cryptography.fernet import Fernet
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quire.backoff import Backoff, Jitter
from quire.identity import provision_identities
from quire.kek import DEVELOPMENT_RING, provision_development_ring
from quire.natsauth import KEEPER, OPERATOR, authorization_config, provision_nats_passwords
from quire.privatefiles import write_private
from quire.runtime import CONFIGURATION_REFUSED, NatsLogin, connect_nats
from quire.settings import (
    SERVICES,
    QueueSettings,
    service_address_var,
    service_health_var,
    service_metrics_var,
)
from quire.stack.datadirlock import DataDirLock
from quire.stack.forked import ForkedProcess, spawn_service
from quire.stack.info import STACK_FILE, StackInfo
from quire.stack.natsserver import NatsServer
from quire.stack.ports import free_port
from quire.stack.refusals import ConfigurationRefused, refusal_line
from quire.stack.scrapeconfig import SCRAPE_FILE, write_scrape_config
from quire.stackdump import STACK_DUMP_SIGNAL, TASK_DUMP_SIGNAL
from quire.tls import sync_channel
from quire.workqueue.topology import ensure_topology

__all__ = [
    "ConfigurationRefused",
    "Stack",
    "StackInfo",
    "STACK_FILE",
    "NATS",
    "ServicesNotInstalled",
    "nats_restart_delay",
]

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_SECONDS = 60.0
STACK_DUMP_SECONDS = 1.0
"""How long a service that never became healthy is given to write its stacks."""
# A service that exits before it is healthy (most often: another process took
# its port between the pick and the bind) makes the stack pick fresh ports and
# start every service again, this many times in all.
STARTUP_ATTEMPTS = 3
WATCH_INTERVAL_SECONDS = 0.2
GATEWAY = "gateway"
"""The HTTP gateway: one more supervised process, healthy when ``/healthz`` answers."""
NATS = "nats"
"""The stack's own nats-server, by name in ``pid``, ``restarts`` and ``kill``."""
NATS_BACKOFF_BASE_SECONDS = 0.5
NATS_BACKOFF_CAP_SECONDS = 5.0
_NATS_BACKOFF = Backoff(NATS_BACKOFF_BASE_SECONDS, NATS_BACKOFF_CAP_SECONDS, Jitter.NONE)
NATS_STABLE_SECONDS = 10.0
"""A nats-server that ran this long before it died is restarted at once."""
PRELOAD_VAR = "LD_PRELOAD"
"""A service whose environment changes it is started afresh, not forked."""
EMBEDDED_EGRESS_ALLOW = "127.0.0.0/8,::1/128"
"""The embedded stack calls loopback receivers (tests, examples); nothing else private."""


def nats_restart_delay(failures: int) -> float:
    """The pause before restarting nats-server after ``failures`` deaths in a
    row, each within ``NATS_STABLE_SECONDS`` of its start: none after the
    first, then doubling from the base, never more than the cap."""
    if failures <= 1:
        return 0.0
    return _NATS_BACKOFF.delay(failures - 1)


class ServicesNotInstalled(RuntimeError):
    """The operator tools (quire-ops) are installed without the services the
    stack runs: each runs as a process of its own, from its own distribution."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(
            "the embedded stack runs the services, and these are not installed: "
            + ", ".join(f"quire-{name}" for name in missing)
            + " (`pip install quire` installs the whole system)"
        )


def _installed(process: str) -> bool:
    """Whether ``process``'s main module is installed here (its code is not imported)."""
    try:
        return importlib.util.find_spec(f"quire.{process}.main") is not None
    except ModuleNotFoundError:  # not even its package (the gateway has no generated API)
        return False


def _not_installed(processes: tuple[str, ...]) -> list[str]:
    return [name for name in processes if not _installed(name)]


class _ExitedBeforeHealthy(RuntimeError):
    """A service process ended before its health check answered SERVING."""


@dataclass
class _Child:
    service: str
    process: subprocess.Popen[bytes] | ForkedProcess
    restarts: int = 0
    expected_exit: bool = False
    started_at: float = field(default_factory=time.monotonic)
    refused: bool = False
    """It exited refusing its configuration: not started again by the watcher."""


@dataclass
class _NatsWatch:
    """What the watcher knows of the stack's nats-server."""

    restarts: int = 0
    failures: int = 0
    """Deaths in a row, each within ``NATS_STABLE_SECONDS`` of its start."""
    started_at: float = field(default_factory=time.monotonic)
    restart_at: float | None = None
    """When the dead server is to be started again; None while it runs."""


class Stack:
    def __init__(
        self,
        data_dir: Path,
        *,
        nats_url: str | None = None,
        env: dict[str, str] | None = None,
        restart: bool = True,
        gateway: bool = False,
        forked: bool = True,
        service_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """``gateway``: also run the HTTP gateway (``quire up`` does; a stack
        started for a test or a benchmark that speaks gRPC only need not).
        ``forked``: fork the services from a zygote that has imported their
        code once (``quire.stack.zygote``); False starts each as
        ``python -m quire.<service>.main``, as a container does.
        ``service_env``: variables added for one service alone, by its name
        (a fault test's skewed clock, say). A service whose variables preload
        a library (``LD_PRELOAD``) is started with ``python -m`` even when
        the others are forked: a fork of the zygote would not load it."""
        self.data_dir = data_dir.resolve()
        self._processes = (*SERVICES, GATEWAY) if gateway else SERVICES
        self._external_nats = nats_url
        self._extra_env = env or {}
        self._service_env = {name: dict(added) for name, added in (service_env or {}).items()}
        self._restart = restart
        self._forked = forked
        self.nats: NatsServer | None = None
        self.endpoints: dict[str, str] = {}
        self.health_endpoints: dict[str, str] = {}
        self.metrics_endpoints: dict[str, str] = {}
        self.gateway_address = ""
        self._pick_endpoints()
        self._children: dict[str, _Child] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._data_dir_lock: DataDirLock | None = None
        self._nats_watch = _NatsWatch()

    def _pick_endpoints(self) -> None:
        self.endpoints = {service: f"127.0.0.1:{free_port()}" for service in SERVICES}
        self.health_endpoints = {service: f"127.0.0.1:{free_port()}" for service in SERVICES}
        self.metrics_endpoints = {
            service: f"127.0.0.1:{free_port()}" for service in self._processes
        }
        self.gateway_address = f"127.0.0.1:{free_port()}" if GATEWAY in self._processes else ""

    @property
    def nats_url(self) -> str:
        if self._external_nats:
            return self._external_nats
        assert self.nats is not None
        return self.nats.url

    def start(self) -> StackInfo:
        """Start everything and wait until healthy; on failure, stop what was started."""
        try:
            return self._start()
        except BaseException:
            self.stop(timeout=10)
            raise

    def _start(self) -> StackInfo:
        missing = _not_installed(self._processes)
        if missing:
            raise ServicesNotInstalled(missing)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # One stack per data directory: DataDirInUse before anything starts.
        self._data_dir_lock = DataDirLock.acquire(self.data_dir)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        provision_identities(self.data_dir / "identity", SERVICES)
        if self.uses_development_kek:
            provision_development_ring(self.kek_ring)
        if GATEWAY in self._processes:
            # The console's session key: sign-ins outlast a gateway restart.
            self.console_key.parent.mkdir(exist_ok=True)
            write_private(self.console_key, Fernet.generate_key(), exclusive=True)
        if not self._external_nats:
            passwords = provision_nats_passwords(
                self.credentials_dir, (*SERVICES, KEEPER, OPERATOR)
            )
            self.nats = NatsServer(
                self.data_dir / "nats",
                port=free_port(),
                monitor_port=free_port(),
                authorization=authorization_config(passwords),
            )
            self.nats.start()
            self._nats_watch = _NatsWatch()
            self._provision_topology()
        self._start_services()
        info = StackInfo(
            data_dir=str(self.data_dir),
            nats_url=self.nats_url,
            endpoints=dict(self.endpoints),
            token_file=str(self.data_dir / "admission" / "dev-token"),
            health_endpoints=dict(self.health_endpoints),
            # The configured file, or the one admission writes on its first start.
            operator_token_file=self.service_env().get("QUIRE_OPERATOR_TOKEN_FILE", "")
            or str(self.data_dir / "admission" / "operator-token"),
            metrics_endpoints=dict(self.metrics_endpoints),
            gateway_url=f"http://{self.gateway_address}" if self.gateway_address else "",
        )
        info.write()
        write_scrape_config(self.data_dir / SCRAPE_FILE, self.metrics_endpoints)
        if self._restart:
            self._watcher = threading.Thread(target=self._watch, name="stack-watch", daemon=True)
            self._watcher.start()
        return info

    def _start_services(self) -> None:
        for attempt in range(1, STARTUP_ATTEMPTS + 1):
            for service in self._processes:
                self._spawn(service)
            try:
                self.wait_healthy(during_startup=True)
                return
            except _ExitedBeforeHealthy:  # not ConfigurationRefused: that would be refused again
                if attempt == STARTUP_ATTEMPTS:
                    raise
                self._stop_children(timeout=10)
                self._children.clear()
                self._pick_endpoints()

    @property
    def kek_ring(self) -> Path:
        """The embedded stack's development KEK ring (production configures its own)."""
        return self.data_dir / DEVELOPMENT_RING

    @property
    def console_key(self) -> Path:
        """The key sealing the console's session cookies (QUIRE_CONSOLE_KEY_FILE)."""
        return self.data_dir / "gateway" / "console-key"

    @property
    def credentials_dir(self) -> Path:
        """The embedded NATS server's passwords, one file per user."""
        return self.data_dir / "credentials" / "nats"

    def nats_login(self, user: str = OPERATOR) -> NatsLogin:
        """``connect_nats`` keywords for ``user`` on the embedded NATS (none for an external one)."""
        if self._external_nats:
            return {}
        password = (self.credentials_dir / f"{user}.password").read_text().strip()
        return {"user": user, "password": password}

    def _provision_topology(self) -> None:
        """Streams, consumers and the job-gate bucket, made with the operator's login."""

        async def provision() -> None:
            nc = await connect_nats(self.nats_url, "quire-stack", **self.nats_login())
            try:
                await ensure_topology(
                    nc.jetstream(timeout=10), QueueSettings.from_env(self.service_env())
                )
            finally:
                await nc.close()

        # Callers may run inside an event loop (tests, the CLI): use a thread of our own.
        failure: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(provision())
            except BaseException as error:  # noqa: BLE001 - re-raised in the caller
                failure.append(error)

        worker = threading.Thread(target=run, name="stack-topology")
        worker.start()
        worker.join()
        if failure:
            raise failure[0]

    def service_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "QUIRE_DATA_DIR": str(self.data_dir),
                "QUIRE_NATS_URL": self.nats_url,
                "PYTHONUNBUFFERED": "1",
            }
        )
        if not self._external_nats:
            env["QUIRE_NATS_CREDENTIALS_DIR"] = str(self.credentials_dir)
        env.update({service_address_var(s): address for s, address in self.endpoints.items()})
        env.update({service_health_var(s): a for s, a in self.health_endpoints.items()})
        env.update({service_metrics_var(s): a for s, a in self.metrics_endpoints.items()})
        if self.gateway_address:
            env[service_address_var(GATEWAY)] = self.gateway_address
            env.setdefault("QUIRE_CONSOLE_KEY_FILE", str(self.console_key))
        # Everything listens on loopback here: a callback receiver or a source
        # system on this machine may be called, and over http.
        env.setdefault("QUIRE_NOTIFY_LOOPBACK_HTTP", "1")
        env.setdefault("QUIRE_EGRESS_ALLOW", EMBEDDED_EGRESS_ALLOW)
        env.update(self._extra_env)
        if self.uses_development_kek:
            env["QUIRE_KEK_FILE"] = str(self.kek_ring)
            env["QUIRE_KEK_DEVELOPMENT"] = "1"
        return env

    @property
    def uses_development_kek(self) -> bool:
        """True unless a KEK was configured (QUIRE_KEK_FILE or a PKCS#11 token)."""
        configured = {**os.environ, **self._extra_env}
        return not (configured.get("QUIRE_KEK_FILE") or configured.get("QUIRE_KEK_PKCS11_MODULE"))

    def own_env(self, service: str) -> dict[str, str]:
        """The variables ``service`` is given besides every service's."""
        return dict(self._service_env.get(service, {}))

    def env_of(self, service: str) -> dict[str, str]:
        """What ``service`` is started with: ``service_env()`` and its own additions."""
        return {**self.service_env(), **self._service_env.get(service, {})}

    def _spawn(self, service: str) -> None:
        module, log = f"quire.{service}.main", self.data_dir / "logs" / f"{service}.log"
        process: subprocess.Popen[bytes] | ForkedProcess
        env = self.env_of(service)
        # The zygote's children inherit its loaded libraries, never a new preload.
        if self._forked and env.get(PRELOAD_VAR) == os.environ.get(PRELOAD_VAR):
            process = spawn_service(module, env, log)
        else:
            with open(log, "ab") as output:
                process = subprocess.Popen(
                    [sys.executable, "-m", module],
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        with self._lock:
            previous = self._children.get(service)
            restarts = previous.restarts + 1 if previous else 0
            self._children[service] = _Child(service, process, restarts)

    def wait_healthy(
        self, timeout: float = HEALTH_TIMEOUT_SECONDS, *, during_startup: bool = False
    ) -> None:
        deadline = time.monotonic() + timeout
        # Each service's own plaintext health port: no credentials, with or without mTLS.
        for service, address in self.health_endpoints.items():
            with sync_channel(address, None) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                while True:
                    child = self._children[service]
                    if child.process.poll() == CONFIGURATION_REFUSED:
                        raise ConfigurationRefused(service, self.refusal(service))
                    if child.process.poll() is not None and (during_startup or not self._restart):
                        raise _ExitedBeforeHealthy(
                            f"{service} exited with {child.process.returncode}"
                            f"; see logs/{service}.log"
                        )
                    try:
                        reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            break
                    except grpc.RpcError:
                        pass
                    if time.monotonic() > deadline:
                        self._ask_for_stacks(child)
                        raise TimeoutError(
                            f"{service} did not become healthy; see logs/{service}.log "
                            "(where its threads were, at the end)"
                        )
                    time.sleep(0.1)
        if self.gateway_address:
            self._wait_gateway(deadline, during_startup)

    @staticmethod
    def _ask_for_stacks(child: _Child) -> None:
        """Have a live service write its threads' and its tasks' stacks to
        its log (``quire.stackdump``), and give it a moment to."""
        if child.process.poll() is None:
            with contextlib.suppress(OSError):
                child.process.send_signal(STACK_DUMP_SIGNAL)
                child.process.send_signal(TASK_DUMP_SIGNAL)
                time.sleep(STACK_DUMP_SECONDS)

    def _wait_gateway(self, deadline: float, during_startup: bool) -> None:
        """Until the gateway's ``/healthz`` answers 200."""
        url = f"http://{self.gateway_address}/healthz"
        while True:
            child = self._children[GATEWAY]
            if child.process.poll() == CONFIGURATION_REFUSED:
                raise ConfigurationRefused(GATEWAY, self.refusal(GATEWAY))
            if child.process.poll() is not None and (during_startup or not self._restart):
                raise _ExitedBeforeHealthy(
                    f"gateway exited with {child.process.returncode}; see logs/gateway.log"
                )
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("gateway did not become healthy; see logs/gateway.log")
            time.sleep(0.1)

    @property
    def supervises_nats(self) -> bool:
        """True when the stack runs its own nats-server and restarts it if it dies."""
        return self._restart and not self._external_nats

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_INTERVAL_SECONDS):
            self.watch_nats()
            for service in self._processes:
                child = self._children[service]
                code = child.process.poll()
                if code is None or child.expected_exit or child.refused:
                    continue
                if self._stopping.is_set():
                    break
                if code == CONFIGURATION_REFUSED:
                    child.refused = True
                    log.error(
                        "%s refused its configuration (exit status %d); not restarted: %s",
                        service,
                        code,
                        self.refusal(service),
                    )
                    continue
                self._spawn(service)

    def refusal(self, service: str) -> str:
        """The service's last "cannot start" line in its log, or ""."""
        return refusal_line(self.data_dir / "logs" / f"{service}.log", service)

    def exit_status(self, service: str) -> int | None:
        """A service process's exit status; None while it runs."""
        return self._children[service].process.poll()

    def watch_nats(self, now: float | None = None) -> None:
        """One look of the watcher at nats-server (it looks every
        ``WATCH_INTERVAL_SECONDS``): start a dead one again once its backoff
        has passed. ``now``: a ``time.monotonic()`` reading (tests pass their own)."""
        nats = self.nats
        if nats is None or not self.supervises_nats or self._stopping.is_set():
            return
        watch = self._nats_watch
        now = time.monotonic() if now is None else now
        if nats.alive:
            if watch.restart_at is not None:  # someone started it during the backoff
                watch.restart_at = None
                watch.started_at = now
            return
        if watch.restart_at is None:
            quick = now - watch.started_at < NATS_STABLE_SECONDS
            watch.failures = watch.failures + 1 if quick else 1
            watch.restart_at = now + nats_restart_delay(watch.failures)
            log.warning("nats-server exited; restarting it (%d in a row)", watch.failures)
        if now < watch.restart_at:
            return
        watch.restart_at = None
        watch.started_at = now
        try:
            started = nats.start(wait=False)  # same port, store, config and logins
        except OSError as error:
            log.error("nats-server did not start again (%s)", type(error).__name__)
            return
        if started:
            watch.restarts += 1

    def _nats_server(self) -> NatsServer:
        if self.nats is None:
            raise ValueError("this stack runs no nats-server of its own (QUIRE_NATS_URL)")
        return self.nats

    def pid(self, service: str) -> int:
        """A service's process id, or nats-server's (``NATS``)."""
        if service == NATS:
            pid = self._nats_server().pid
            assert pid is not None
            return pid
        return self._children[service].process.pid

    def restarts(self, service: str) -> int:
        """How often the watcher restarted a service, or nats-server (``NATS``)."""
        if service == NATS:
            self._nats_server()
            return self._nats_watch.restarts
        return self._children[service].restarts

    def kill(self, service: str) -> None:
        """SIGKILL one service, or nats-server (``NATS``); the watcher restarts it."""
        if service == NATS:
            self._nats_server().kill()
            return
        self._children[service].process.kill()

    def stop_service(self, service: str) -> None:
        """Stop one service gracefully and keep it stopped."""
        child = self._children[service]
        child.expected_exit = True
        child.process.terminate()
        child.process.wait(timeout=30)

    def start_service(self, service: str, env: Mapping[str, str] | None = None) -> None:
        """Start a stopped service; ``env``: its own additions from now on
        (instead of those it was given), kept when the watcher restarts it."""
        if env is not None:
            self._service_env[service] = dict(env)
        self._spawn(service)

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join()
        self._stop_children(timeout)
        if self.nats is not None:
            self.nats.stop()
        if self._data_dir_lock is not None:
            self._data_dir_lock.release()

    def _stop_children(self, timeout: float) -> None:
        for child in self._children.values():
            child.expected_exit = True
            if child.process.poll() is None:
                child.process.terminate()
        deadline = time.monotonic() + timeout
        for child in self._children.values():
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
