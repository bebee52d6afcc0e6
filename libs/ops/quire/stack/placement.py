"""Where a process of a test cluster runs: the address it binds and is
reached at, and the command that puts it there.

``LOOPBACK`` is this machine's loopback with no wrapper, as the embedded
stack runs everything. A test that gives each node a network namespace of
its own (``quire.testing.netns``) places a process at the node's private
address behind ``ip netns exec <namespace>``, which execs the command in
place: the process started is the server itself, so signalling its pid
reaches it, not a wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LOOPBACK", "Placement"]


@dataclass(frozen=True)
class Placement:
    host: str
    """The IPv4 address the process binds and others reach it at."""
    prefix: tuple[str, ...] = ()
    """Put before the process's command (an ``ip netns exec`` that execs in place)."""
    node: str = ""
    """The name of the namespace's node, if it has one."""

    def command(self, argv: list[str]) -> list[str]:
        return [*self.prefix, *argv]


LOOPBACK = Placement("127.0.0.1")
