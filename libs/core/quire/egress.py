"""Where Quire's outbound HTTP may go: tenants' callback URLs and operators'
source systems.

An address is called only if it is global (routable on the internet and
not reserved: Python's ``ipaddress`` ``is_global``, and not multicast), or
inside a network the operator allows (``QUIRE_EGRESS_ALLOW``, CIDRs: real
internal receivers, or loopback on the embedded stack). Loopback, private,
shared (100.64/10), link-local (the cloud metadata service), unique-local
and reserved addresses are refused by default; an IPv4 address mapped into
IPv6 is judged as the IPv4 address it names.

The check is made twice. When a URL is registered, its host (an address, or
a name resolved then) is checked so that the caller hears at once. And on
every connection: ``GuardedBackend`` resolves the host itself, refuses the
connection if any address it resolves to is not allowed, and connects to the
addresses it checked, so a name that resolves elsewhere by the time of the
call (DNS rebinding) reaches nothing. TLS still verifies the URL's host name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpcore
import httpx
from pydantic import BeforeValidator

from quire.environment import Expect, Settings, Variable

__all__ = [
    "EgressPolicy",
    "EgressRefused",
    "GuardedBackend",
    "guarded_transport",
    "was_refused",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

REGISTRATION_LOOKUP_SECONDS = 2.0
"""How long a registration waits for its host's name to resolve."""


class EgressRefused(httpcore.ConnectError):
    """A connection Quire would not open: the host resolves to an address the
    policy does not allow. The message names no host and no address."""


def _judged(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _networks(value: object) -> object:
    """Comma-separated networks (``10.2.0.0/16,::1/128``) as a tuple."""
    if not isinstance(value, str):
        return value
    items = [item.strip() for item in value.split(",") if item.strip()]
    return tuple(ipaddress.ip_network(item, strict=False) for item in items)


class EgressPolicy(Settings):
    """Global addresses, and the operator's ``allowed`` networks."""

    allowed: Annotated[
        tuple[IPNetwork, ...],
        BeforeValidator(_networks),
        Variable("QUIRE_EGRESS_ALLOW"),
        Expect("comma-separated CIDR networks"),
    ] = ()
    """Networks that callbacks (admission) and source systems (the validator)
    may be called at besides global addresses, comma-separated CIDRs; ``quire
    up`` allows loopback."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EgressPolicy:
        return cls.read(env)

    def permits(self, address: IPAddress) -> bool:
        address = _judged(address)
        if any(address.version == n.version and address in n for n in self.allowed):
            return True
        return address.is_global and not address.is_multicast

    def permits_all(self, addresses: Iterable[IPAddress]) -> bool:
        found = list(addresses)
        return bool(found) and all(self.permits(a) for a in found)

    async def refusal_of_url(self, url: str) -> str | None:
        """``refusal_of_host`` for an http(s) URL's host and port."""
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return await self.refusal_of_host(parts.hostname or "", port)

    async def refusal_of_host(self, host: str, port: int) -> str | None:
        """Why a URL with this host may not be registered, or None. A name that
        does not resolve now is left to the connection's own check."""
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            try:
                async with asyncio.timeout(REGISTRATION_LOOKUP_SECONDS):
                    found = await resolve(host, port)
            except (OSError, TimeoutError):
                return None
            if not found or self.permits_all(found):
                return None
            return "its host resolves to an address Quire does not call"
        if self.permits(literal):
            return None
        return "an address Quire does not call (loopback, private, link-local or reserved)"


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to for a TCP connection, in the
    resolver's order, each once."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = ipaddress.ip_address(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]
"""A host name and port to the addresses to try, in order."""


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses the policy allows."""

    def __init__(
        self,
        policy: EgressPolicy,
        backend: httpcore.AsyncNetworkBackend | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self._policy = policy
        self._backend = backend or httpcore.AnyIOBackend()
        self._resolve = resolver or resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._resolve(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout("the host's name did not resolve in time") from None
        except OSError:
            raise httpcore.ConnectError("the host's name does not resolve") from None
        if not self._policy.permits_all(addresses):
            raise EgressRefused("the host resolves to an address Quire does not call")
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._backend.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                last = error
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressRefused("Unix sockets are not an outbound destination")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def guarded_transport(
    policy: EgressPolicy,
    *,
    limits: httpx.Limits | None = None,
    resolver: Resolver | None = None,
) -> httpx.AsyncHTTPTransport:
    """httpx's transport, its connection pool on ``GuardedBackend``.

    httpx 0.28 takes no network backend, so the pool it built is replaced by
    httpcore's public ``AsyncConnectionPool`` with the same settings on the
    guarded backend. No proxy and no environment: the client connects itself."""
    limits = limits or httpx.Limits()
    transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    if not isinstance(transport._pool, httpcore.AsyncConnectionPool):  # noqa: SLF001
        raise TypeError("httpx's transport no longer keeps an httpcore pool")
    transport._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001 - see above
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedBackend(policy, resolver=resolver),
    )
    return transport


def was_refused(error: BaseException) -> bool:
    """Whether an httpx error is the policy's refusal (httpx keeps httpcore's
    error as its cause)."""
    seen: Sequence[BaseException | None] = (error, error.__cause__, error.__context__)
    return any(isinstance(e, EgressRefused) for e in seen)
