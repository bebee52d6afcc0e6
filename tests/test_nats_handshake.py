"""A NATS client is handed out only once its handshake completed.

A server slow to take a CONNECT (its bcrypt check on a loaded host) sends
its first PING two seconds after accepting the connection, before the PONG
nats-py waits for; nats-py then returns a client that is not connected and
never sends anything, so every request of the service would time out in
silence (services once hung at startup with an empty log this way).
Here a real nats-server checks a bcrypt hash of cost 16 (seconds of work)
so the PING always comes first."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import nats
import pytest

from quire import runtime
from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.stack.ports import free_port

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
NATS_SERVER = ROOT / ".venv" / "bin" / "nats-server"
SLOW_ROUNDS = 16
"""bcrypt's cost: some four seconds a check here, past the server's first PING."""


@pytest.fixture
def slow_login_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(SLOW_ROUNDS)).decode()
    config = tmp_path / "nats.conf"
    config.write_text(
        f"listen: 127.0.0.1:{port}\n"
        f'authorization {{ users = [ {{ user: slow, password: "{hashed}" }} ] }}\n'
    )
    server = subprocess.Popen(
        [str(NATS_SERVER), "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=20)


async def _listening(url: str) -> None:
    host, port = url.removeprefix("nats://").split(":")
    for _ in range(100):
        try:
            _reader, writer = await asyncio.open_connection(host, int(port))
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise AssertionError("nats-server never listened")


async def test_nats_py_alone_returns_a_client_that_is_not_connected(slow_login_server: str) -> None:
    """The library's behaviour the guard is for: if this starts to fail,
    nats-py completes the handshake itself and the guard can go."""
    await _listening(slow_login_server)
    client = await nats.connect(
        slow_login_server, user="slow", password="secret", connect_timeout=10
    )
    try:
        assert not client.is_connected
    finally:
        await client.close()


async def test_a_handshake_that_never_completes_is_a_typed_refusal_not_a_dead_client(
    slow_login_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _listening(slow_login_server)
    monkeypatch.setattr(runtime, "HANDSHAKE_TRIES", 1)
    with pytest.raises(TransientError) as refused:
        await runtime.connect_nats(slow_login_server, "probe", user="slow", password="secret")
    assert refused.value.reason == ReasonCode.QUEUE_UNAVAILABLE


async def test_a_prompt_server_connects_at_once(nats_server) -> None:  # type: ignore[no-untyped-def]
    client = await runtime.connect_nats(nats_server.url, "probe")
    try:
        assert client.is_connected
        await client.flush(timeout=5)
    finally:
        await client.close()
