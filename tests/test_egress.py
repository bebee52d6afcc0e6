"""The egress policy and the guarded connection: which addresses Quire calls,
and a connection that checks the addresses it dials, on a real loopback
server (a resolver stands in for DNS only to show rebinding)."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator

import httpx
import pytest

from quire.egress import EgressPolicy, guarded_transport, was_refused
from quire.errors import InvalidSetting
from quire.testing.loopbackegress import LOOPBACK_EGRESS

REFUSED = [
    "127.0.0.1",
    "127.0.0.2",
    "::1",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",
    "169.254.169.254",
    "fd00::1",
    "fe80::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "0.0.0.0",
    "::",
    "224.0.0.1",
    "ff02::1",
    "192.0.2.1",
    "2001:db8::1",
]
PERMITTED = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", REFUSED)
def test_internal_and_reserved_addresses_are_refused_by_default(address: str) -> None:
    assert not EgressPolicy().permits(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PERMITTED)
def test_global_addresses_are_called(address: str) -> None:
    assert EgressPolicy().permits(ipaddress.ip_address(address))


def test_the_operators_allow_list_opens_its_networks_only() -> None:
    policy = EgressPolicy.from_env({"QUIRE_EGRESS_ALLOW": " 10.2.0.0/16 , fd00:1::/64"})
    assert policy.permits(ipaddress.ip_address("10.2.9.9"))
    assert policy.permits(ipaddress.ip_address("::ffff:10.2.0.1"))
    assert policy.permits(ipaddress.ip_address("fd00:1::5"))
    assert not policy.permits(ipaddress.ip_address("10.3.0.1"))
    assert not policy.permits(ipaddress.ip_address("169.254.169.254"))
    assert not policy.permits_all([]), "nothing resolved is nothing to call"
    with pytest.raises(InvalidSetting):
        EgressPolicy.from_env({"QUIRE_EGRESS_ALLOW": "10.2.0.0/16,internal"})


async def test_registration_checks_addresses_and_names_that_resolve() -> None:
    policy = EgressPolicy()
    assert await policy.refusal_of_host("169.254.169.254", 443)
    assert await policy.refusal_of_host("[fd00::1]", 443)
    assert await policy.refusal_of_host("localhost", 443), "a name that resolves inside"
    assert await policy.refusal_of_host("8.8.8.8", 443) is None
    assert await policy.refusal_of_host("no-such-host.invalid", 443) is None, (
        "a name that does not resolve now is left to the connection's check"
    )
    assert await LOOPBACK_EGRESS.refusal_of_host("127.0.0.1", 80) is None


class _Server:
    """A loopback HTTP server that counts the connections it accepts."""

    def __init__(self) -> None:
        self.connections = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def __aenter__(self) -> _Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()
        await self._server.wait_closed()


@pytest.fixture
async def server() -> AsyncIterator[_Server]:
    async with _Server() as running:
        yield running


async def _get(transport: httpx.AsyncBaseTransport, url: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=transport, follow_redirects=False) as client:
        return await client.get(url)


async def test_a_connection_inside_is_refused_before_it_is_made(server: _Server) -> None:
    with pytest.raises(httpx.ConnectError) as refused:
        await _get(guarded_transport(EgressPolicy()), f"http://127.0.0.1:{server.port}/x")
    assert was_refused(refused.value)
    assert "127.0.0.1" not in str(refused.value)
    assert server.connections == 0
    allowed = await _get(guarded_transport(LOOPBACK_EGRESS), f"http://127.0.0.1:{server.port}/x")
    assert allowed.status_code == 204 and server.connections == 1


async def test_a_name_that_rebinds_inside_reaches_nothing(server: _Server) -> None:
    """Checked at registration as a public address, the name resolves to
    loopback when the call is made: the connection dials nothing. A name
    resolving to a public and an inside address is refused whole."""
    answers = {
        "rebind.example": [ipaddress.ip_address("127.0.0.1")],
        "mixed.example": [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("127.0.0.1")],
    }

    async def resolver(
        host: str, _port: int
    ) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return list(answers[host])

    for host in answers:
        transport = guarded_transport(EgressPolicy(), resolver=resolver)
        with pytest.raises(httpx.ConnectError) as refused:
            await _get(transport, f"http://{host}:{server.port}/x")
        assert was_refused(refused.value), host
    assert server.connections == 0
    # The same resolver with loopback allowed connects to the address it checked.
    transport = guarded_transport(LOOPBACK_EGRESS, resolver=resolver)
    assert (await _get(transport, f"http://rebind.example:{server.port}/x")).status_code == 204
    assert server.connections == 1
