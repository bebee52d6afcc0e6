"""Free loopback ports for the embedded stack and tests.

Ports are drawn below the kernel's ephemeral range (32768 and up on Linux),
so that a port chosen here is not taken, between the check and the bind, by
an outgoing connection of some other process.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

LOW, HIGH = 20000, 32767
ATTEMPTS = 200


def free_port() -> int:
    for _ in range(ATTEMPTS):
        port = random.randint(LOW, HIGH)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port found")
