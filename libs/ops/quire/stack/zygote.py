"""The process the embedded stack forks its services from.

A service spends most of a second of CPU importing gRPC, SQLAlchemy,
nats-py, protobuf and OpenTelemetry before it does anything, and a stack
starts five of them, and one again each time one dies. The zygote imports
every service's code once, then forks each service from itself; the child
takes a session, output, working directory, environment and arguments of its
own and runs its module as ``python -m`` does, exiting the same way (atexit
handlers, threads joined, streams flushed).

Only the embedded stack (``quire up``, the tests) starts services this way;
in production each service is its own container, started with ``python -m``.

It speaks JSON lines: a request on stdin is ``{"module", "env", "log",
"cwd"}``; the answer on stdout is ``{"pid"}`` (or ``{"error"}``), and each
child reaped is reported as ``{"exited", "code", "cpu"}`` (a negative code is
the signal that ended it, as ``subprocess`` reports it; ``cpu`` the seconds it
and the processes it reaped used). It ends when stdin
closes, so it never outlives the stack that started it.
"""

from __future__ import annotations

import gc
import importlib
import io
import json
import os
import runpy
import select
import signal
import sys
from typing import Any

from quire.stackdump import answer_stack_dumps

PRELOAD = (
    "quire.admission.main",
    "quire.validator.main",
    "quire.assembler.main",
    "quire.signer.main",
    "quire.audit.main",
    "quire.gateway.main",
)
"""Every service's main module, with all it imports. Importing them runs no
service: each starts in its ``main()``, which reads its settings then."""


def _preload(extra: list[str]) -> None:
    for module in (*PRELOAD, *extra):
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # a service not installed here: its child imports what it can
    # Objects made so far are never collected: the collector would write to
    # every page each child shares with the zygote, copying them all.
    gc.collect()
    gc.freeze()


def _reply(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _reap() -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        _reply({"exited": pid, "code": code, "cpu": usage.ru_utime + usage.ru_stime})


def _serve() -> dict[str, Any] | None:
    """Fork a child per request; in the child, return its request (None in
    the zygote once stdin closes)."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        readable, _, _ = select.select([0, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        _reap()
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as error:
                _reply({"error": type(error).__name__})
                continue
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_read)
                os.close(wake_write)
                return dict(request)
            _reply({"pid": pid})


def _become(request: dict[str, Any]) -> None:
    """In the child: take the service's place, then run its module."""
    os.setsid()
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    answer_stack_dumps()  # into the log, even while the module is still loading
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):  # PYTHONUNBUFFERED was read at the zygote's start
            stream.reconfigure(line_buffering=True, write_through=True)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # Run as `python -m` does: the module's own code afresh (what it imports
    # is loaded already), not the copy the zygote imported.
    sys.modules.pop(request["module"], None)
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def main() -> None:
    _preload(sys.argv[1:])  # modules to load besides the services' (a test's stand-in)
    request = _serve()
    if request is not None:
        _become(request)


if __name__ == "__main__":
    main()
