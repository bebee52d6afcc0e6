"""Service processes of the embedded stack, forked by its zygote
(``quire.stack.zygote``), with the part of ``subprocess.Popen`` the stack uses.

One zygote serves every stack of a process (a test worker starts dozens), and
a new one is started if it dies. A child's exit code comes from the zygote,
which reaps it; a pidfd tells when the child is gone even if the zygote is
gone too (its exit code then is unknown, reported as killed).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

LOST = -signal.SIGKILL
"""The exit code of a child whose zygote died before reporting it."""


class ZygoteGone(RuntimeError):
    """The zygote ended before it answered."""


class Zygote:
    """A running zygote: ``spawn`` forks a service from it."""

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        """``preload``: modules to import besides the services' own."""
        self._process = subprocess.Popen(
            [sys.executable, "-m", "quire.stack.zygote", *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C is the stack's to handle
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._requests: IO[bytes] = self._process.stdin
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._answers: list[dict[str, object]] = []
        self._exits: dict[int, int] = {}
        self._reader = threading.Thread(
            target=self._read, args=(self._process.stdout,), name="zygote-reader", daemon=True
        )
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def _read(self, answers: IO[bytes]) -> None:
        for line in answers:
            message = json.loads(line)
            with self._changed:
                if "exited" in message:
                    self._exits[int(message["exited"])] = int(message["code"])
                    _add_reaped_cpu(float(message.get("cpu", 0.0)))
                else:
                    self._answers.append(message)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def spawn(self, module: str, env: dict[str, str], log: Path) -> ForkedProcess:
        request = {"module": module, "env": env, "log": str(log), "cwd": os.getcwd()}
        with self._lock:
            try:
                self._requests.write((json.dumps(request) + "\n").encode())
                self._requests.flush()
            except (BrokenPipeError, ValueError) as error:
                raise ZygoteGone("the zygote is gone") from error
            with self._changed:
                while not self._answers:
                    if not self.alive:
                        raise ZygoteGone("the zygote ended before it answered")
                    self._changed.wait(0.5)
                answer = self._answers.pop(0)
        if "pid" not in answer:
            raise OSError(f"the zygote could not fork: {answer.get('error')}")
        return ForkedProcess(int(str(answer["pid"])), self)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s exit code once the zygote reports it (None if it does not
        within ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while pid not in self._exits:
                remaining = None if deadline is None else deadline - time.monotonic()
                if (remaining is not None and remaining <= 0) or not self._reader.is_alive():
                    return self._exits.get(pid)
                self._changed.wait(remaining)
            return self._exits[pid]

    def close(self) -> None:
        """Close its stdin (it ends) and wait for it."""
        try:
            self._requests.close()
        except OSError:
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class ForkedProcess:
    """A child of the zygote, as the stack sees a ``subprocess.Popen``.

    The stack's watcher thread polls it while another thread may wait for it
    or signal it: one lock guards its pidfd, which the first to see the end
    closes."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote
        self._lock = threading.Lock()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = None  # already gone (and reaped)

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None and self._gone():
                self._settle()
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            time.sleep(0.05)
        return code

    def _gone(self) -> bool:
        """Whether the child has ended (the lock held)."""
        if self._pidfd is None:
            return True
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(0))

    def _settle(self) -> None:
        """The child has ended: take its exit code from the zygote (the lock held)."""
        code = self._zygote.exit_code(self.pid, timeout=5)
        self.returncode = LOST if code is None else code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def send_signal(self, signum: int) -> None:
        with self._lock:
            if self.returncode is not None or self._pidfd is None:
                return
            try:
                signal.pidfd_send_signal(self._pidfd, signum)
            except ProcessLookupError:
                pass  # ended and reaped meanwhile

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_shared: Zygote | None = None
_shared_lock = threading.Lock()
_reaped_cpu = [0.0]
_reaped_cpu_lock = threading.Lock()


def _add_reaped_cpu(seconds: float) -> None:
    with _reaped_cpu_lock:
        _reaped_cpu[0] += seconds


def reaped_cpu_seconds() -> float:
    """The CPU time of every forked child of this process's zygotes that has
    ended, as ``RUSAGE_CHILDREN`` counts a process's own children's."""
    with _reaped_cpu_lock:
        return _reaped_cpu[0]


def spawn_service(module: str, env: dict[str, str], log: Path) -> ForkedProcess:
    """Fork ``module`` from this process's zygote, started (again) if need be."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive:
            _shared = Zygote()
        zygote = _shared
    try:
        return zygote.spawn(module, env, log)
    except ZygoteGone:
        with _shared_lock:
            if _shared is zygote:
                _shared = Zygote()
            zygote = _shared
        return zygote.spawn(module, env, log)
