"""A local HTTP server that plays the source systems of sources named by
reference: ``GET {base_url}/{key}`` answers a stored record, with
``Authorization: Bearer <token>`` checked when the system has one.

One server plays several systems, each under its own path prefix
(``base_url(system)``). Each system can be told, at any time while the server
runs, to be slow, to fail, to truncate its bodies, to send shipment events
twice or to stream far more than any byte limit (``behave``). Every request
is logged as a ``Call``.

The server runs on daemon threads of its own (``http.server``), not on any
asyncio loop, so code under test may call it from other event loops and
other processes. A benchmark in another process drives it over HTTP:

- ``POST /_control/behave/{system}``: JSON object of ``behave``'s keywords
  (``{}`` resets);
- ``POST /_control/put/{system}/{key}``: the raw body, stored with the
  request's ``Content-Type``;
- ``POST /_control/token/{system}``: ``{"token": "..."}``, as ``require_token``;
- ``GET /_control/calls[?system=...]``: the call log as a JSON list.

``python -m quire.testing.sourceserver --port N`` serves in the foreground,
prints its URL on one line and stops on SIGTERM or SIGINT.

For one request the server decides, in this order: wait ``delay``; answer
``status`` if set; answer 503 while ``fail_times`` lasts; 401 without the
system's token; stream ``oversize`` bytes if set (whatever the key); 404 for
a missing key; else the record (events doubled, then truncated, as told).
"""

from __future__ import annotations

import argparse
import hmac
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, cast
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["Call", "SourceServer", "main"]

CHUNK = 64 * 1024
CONTROL = "_control"
_PAD_HEAD = b'{"pad": "'
_PAD_TAIL = b'"}'
_BEHAVIOUR_KEYS = frozenset(
    {"delay", "status", "fail_times", "truncate", "duplicate_events", "oversize"}
)


@dataclass(frozen=True)
class Call:
    """One request to a source system, as the server answered it."""

    system: str
    key: str
    at: float
    """``time.time()`` when the request arrived."""
    status: int
    """The status sent; 0 when the server stopped before answering."""
    authorized: bool
    """The request carried the system's token (or the system needs none)."""


@dataclass(frozen=True)
class _Behaviour:
    delay: float = 0.0
    status: int | None = None
    fail_times: int = 0
    truncate: bool = False
    duplicate_events: bool = False
    oversize: int = 0


@dataclass(frozen=True)
class _Record:
    body: bytes
    content_type: str


@dataclass(frozen=True)
class _Plan:
    behaviour: _Behaviour
    failing: bool
    authorized: bool
    record: _Record | None


class _State:
    """What the server knows and was told, shared by its threads under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[tuple[str, str], _Record] = {}
        self.tokens: dict[str, str] = {}
        self.behaviours: dict[str, _Behaviour] = {}
        self.fails_left: dict[str, int] = {}
        self.log: list[Call] = []
        self.arrivals: dict[str, int] = {}
        self.connections: dict[socket.socket, threading.Thread] = {}
        self.stopping = threading.Event()

    def plan(self, system: str, key: str, authorization: str | None) -> _Plan:
        with self.lock:
            self.arrivals[system] = self.arrivals.get(system, 0) + 1
            behaviour = self.behaviours.get(system, _Behaviour())
            failing = False
            if behaviour.status is None and self.fails_left.get(system, 0) > 0:
                self.fails_left[system] -= 1
                failing = True
            token = self.tokens.get(system)
            record = self.records.get((system, key))
        authorized = token is None or hmac.compare_digest(
            (authorization or "").encode(), f"Bearer {token}".encode()
        )
        return _Plan(behaviour, failing, authorized, record)

    def logged(self, call: Call) -> None:
        with self.lock:
            self.log.append(call)

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds``; False at once if the server stops meanwhile."""
        return not self.stopping.wait(seconds)

    def opened(self, sock: socket.socket) -> None:
        with self.lock:
            stopping = self.stopping.is_set()
            if not stopping:
                self.connections[sock] = threading.current_thread()
        if stopping:
            _shut(sock)

    def closed(self, sock: socket.socket) -> None:
        with self.lock:
            self.connections.pop(sock, None)


class SourceServer:
    """Source systems on one loopback port; ``with SourceServer() as server:``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._state = _State()
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------

    def start(self) -> SourceServer:
        if self._server is not None or self._state.stopping.is_set():
            raise RuntimeError("a SourceServer starts once")
        self._server = _HTTPServer((self.host, self.port), self, self._state)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"sourceserver:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop serving: slow responses give up, open connections are shut;
        waits at most about ``timeout`` seconds for the threads to end."""
        server, thread, state = self._server, self._thread, self._state
        if server is None or state.stopping.is_set():
            return
        deadline = time.monotonic() + timeout
        state.stopping.set()
        server.shutdown()
        with state.lock:
            connections = list(state.connections.items())
        for sock, _ in connections:
            _shut(sock)
        server.server_close()
        for running in [thread, *(t for _, t in connections)]:
            if running is not None and running is not threading.current_thread():
                running.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> SourceServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the SourceServer is not started")
        return f"http://{self.host}:{self.port}"

    def base_url(self, system: str) -> str:
        """The base URL a source system registration names for ``system``."""
        return f"{self.url}/{quote(system, safe='')}"

    # -- what it serves and how --------------------------------------------

    def put(
        self, system: str, key: str, body: bytes, content_type: str = "application/json"
    ) -> None:
        """Store (or replace) the record ``GET {base_url(system)}/{key}`` answers."""
        with self._state.lock:
            self._state.records[(system, key)] = _Record(bytes(body), content_type)

    def put_json(self, system: str, key: str, obj: Any) -> None:
        """Store ``json.dumps(obj)`` as an ``application/json`` record."""
        self.put(system, key, json.dumps(obj).encode())

    def require_token(self, system: str, token: str) -> None:
        """Requests to ``system`` without ``Authorization: Bearer <token>`` get 401."""
        with self._state.lock:
            self._state.tokens[system] = token

    def behave(
        self,
        system: str,
        *,
        delay: float = 0.0,
        status: int | None = None,
        fail_times: int = 0,
        truncate: bool = False,
        duplicate_events: bool = False,
        oversize: int = 0,
    ) -> None:
        """How ``system`` answers from now on; no keywords: normally.

        ``delay`` seconds before the headers; ``status`` for every call;
        503 for the next ``fail_times`` calls; ``truncate``: the full
        Content-Length but half the bytes, then the connection closes;
        ``duplicate_events``: each event of ``{"shipment": {"events": [...]}}``
        or ``{"events": [...]}`` sent twice in a row; ``oversize``: that many
        bytes of JSON, chunked, instead of the record.
        """
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
            raise ValueError(f"delay must be a number of seconds >= 0, not {delay!r}")
        if status is not None and (
            isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599
        ):
            raise ValueError(f"status must be 200..599 or None, not {status!r}")
        for name, count in (("fail_times", fail_times), ("oversize", oversize)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"{name} must be an integer >= 0, not {count!r}")
        for name, flag in (("truncate", truncate), ("duplicate_events", duplicate_events)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be true or false, not {flag!r}")
        behaviour = _Behaviour(
            float(delay), status, fail_times, truncate, duplicate_events, oversize
        )
        with self._state.lock:
            self._state.behaviours[system] = behaviour
            self._state.fails_left[system] = fail_times

    def arrived(self, system: str) -> int:
        """Requests to ``system`` that have arrived, answered or not yet (one
        held by a ``delay`` counts from the start of its wait)."""
        with self._state.lock:
            return self._state.arrivals.get(system, 0)

    def calls(self, system: str | None = None) -> list[Call]:
        """The call log (of one system, or all), in order of arrival; a call is
        logged once answered (or abandoned by ``stop``)."""
        with self._state.lock:
            calls = [c for c in self._state.log if system is None or c.system == system]
        return sorted(calls, key=lambda c: c.at)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _duplicate_events(body: bytes) -> bytes:
    """Each event sent twice in a row, if the record has events; else ``body``."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    if not isinstance(doc, dict):
        return body
    shipment = doc.get("shipment")
    if isinstance(shipment, dict) and isinstance(shipment.get("events"), list):
        holder = shipment
    elif isinstance(doc.get("events"), list):
        holder = doc
    else:
        return body
    holder["events"] = [event for event in holder["events"] for _ in (0, 1)]
    return json.dumps(doc).encode()


def _oversize_chunks(size: int) -> Iterator[bytes]:
    """``size`` bytes of ``{"pad": "xxx...x"}`` (a prefix of it if tiny), in CHUNKs."""
    if size < len(_PAD_HEAD) + len(_PAD_TAIL):
        if size:
            yield (_PAD_HEAD + _PAD_TAIL)[:size]
        return
    tail_at = size - len(_PAD_TAIL)
    for start in range(0, size, CHUNK):
        end = min(start + CHUNK, size)
        head = _PAD_HEAD[start:end]
        pad = max(0, min(end, tail_at) - max(start, len(_PAD_HEAD)))
        tail = _PAD_TAIL[max(0, start - tail_at) : max(0, end - tail_at)]
        yield head + b"x" * pad + tail


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: SourceServer, state: _State) -> None:
        self.owner = owner
        self.state = state
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that went away, or a connection shut by stop()
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    @property
    def owner(self) -> SourceServer:
        return cast(_HTTPServer, self.server).owner

    @property
    def state(self) -> _State:
        return cast(_HTTPServer, self.server).state

    def setup(self) -> None:
        super().setup()
        self.state.opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.state.closed(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        return None

    # -- plumbing ----------------------------------------------------------

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Content-Type", content_type)
        if status in (204, 304):
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    # -- methods -----------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        arrived = time.time()
        self._body()
        url = urlsplit(self.path)
        first, _, rest = url.path.lstrip("/").partition("/")
        if unquote(first) == CONTROL:
            self._control_get(rest, url.query)
        else:
            self._source(unquote(first), unquote(rest), arrived)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self._body()
        url = urlsplit(self.path)
        first, _, rest = url.path.lstrip("/").partition("/")
        if unquote(first) != CONTROL:
            self._send_json(405, {"error": "source systems answer GET only"})
            return
        self._control_post(rest, body)

    # -- a source system ---------------------------------------------------

    def _source(self, system: str, key: str, arrived: float) -> None:
        state = self.state
        plan = state.plan(system, key, self.headers.get("Authorization"))
        behaviour = plan.behaviour
        status = 0
        try:
            if behaviour.delay and not state.wait(behaviour.delay):
                self.close_connection = True
                return
            if behaviour.status is not None:
                status = behaviour.status
                self._send_json(status, {"error": f"status {status} as told"})
            elif plan.failing:
                status = 503
                self._send_json(status, {"error": "unavailable as told"})
            elif not plan.authorized:
                status = 401
                self._send_json(status, {"error": "missing or wrong bearer token"})
            elif behaviour.oversize:
                status = 200
                content_type = plan.record.content_type if plan.record else "application/json"
                self._stream(behaviour.oversize, content_type)
            elif plan.record is None:
                status = 404
                self._send_json(status, {"error": "no such record", "system": system, "key": key})
            else:
                status = 200
                body = plan.record.body
                if behaviour.duplicate_events:
                    body = _duplicate_events(body)
                if behaviour.truncate:
                    self._truncated(body, plan.record.content_type)
                else:
                    self._send(status, body, plan.record.content_type)
        except OSError:
            self.close_connection = True
        finally:
            state.logged(Call(system, key, arrived, status, plan.authorized))

    def _truncated(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True

    def _stream(self, size: int, content_type: str) -> None:
        chunked = self.request_version != "HTTP/1.0"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        for chunk in _oversize_chunks(size):
            if self.state.stopping.is_set():
                self.close_connection = True
                return
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                self.wfile.write(chunk)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    # -- the control interface ---------------------------------------------

    def _control_get(self, rest: str, query: str) -> None:
        if rest != "calls":
            self._send_json(404, {"error": "no such control"})
            return
        system = parse_qs(query).get("system", [None])[0]
        self._send_json(200, [asdict(c) for c in self.owner.calls(system)])

    def _control_post(self, rest: str, body: bytes) -> None:
        action, _, target = rest.partition("/")
        system_part, _, key_part = target.partition("/")
        system, key = unquote(system_part), unquote(key_part)
        if not system:
            self._send_json(404, {"error": "no such control"})
            return
        if action == "put" and key:
            content_type = self.headers.get("Content-Type") or "application/json"
            self.owner.put(system, key, body, content_type)
            self._send_json(200, {"system": system, "key": key, "bytes": len(body)})
            return
        if action not in ("behave", "token") or key:
            self._send_json(404, {"error": "no such control"})
            return
        try:
            args = json.loads(body or b"{}")
        except ValueError:
            self._send_json(400, {"error": "the body must be a JSON object"})
            return
        if not isinstance(args, dict):
            self._send_json(400, {"error": "the body must be a JSON object"})
            return
        if action == "token":
            token = args.get("token")
            if not isinstance(token, str) or set(args) != {"token"}:
                self._send_json(400, {"error": 'the body must be {"token": "..."}'})
                return
            self.owner.require_token(system, token)
            self._send_json(200, {"system": system})
            return
        unknown = sorted(set(args) - _BEHAVIOUR_KEYS)
        if unknown:
            self._send_json(400, {"error": f"unknown keywords: {', '.join(unknown)}"})
            return
        try:
            self.owner.behave(system, **args)
        except ValueError as exc:
            self._send_json(400, {"error": str(exc)})
            return
        self._send_json(200, {"system": system, **args})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m quire.testing.sourceserver",
        description="Serve source systems for tests and benchmarks until SIGTERM or SIGINT.",
    )
    parser.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with SourceServer(args.host, args.port) as server:
        print(server.url, flush=True)
        while not stopping.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
