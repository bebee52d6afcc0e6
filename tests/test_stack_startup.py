"""The embedded stack comes up even when a port it picked is taken before the bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from quire.stack.ports import free_port
from quire.stack.supervisor import Stack


def test_free_port_does_not_hand_out_a_port_twice_in_a_row() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


@pytest.mark.stack
def test_a_service_whose_port_was_taken_is_started_again_on_fresh_ports(tmp_path: Path) -> None:
    # Each service started as `python -m quire.<service>.main`, as a container
    # starts it (every other stack of the suite forks them from a zygote).
    stack = Stack(tmp_path / "stack", forked=False)
    taken = stack.endpoints["assembler"]
    host, port = taken.rsplit(":", 1)
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind((host, int(port)))
    squatter.listen()
    try:
        info = stack.start()
        try:
            assert info.endpoints["assembler"] != taken
            assert stack.restarts("assembler") == 0
            assert b"Failed to bind" in (tmp_path / "stack" / "logs" / "assembler.log").read_bytes()
        finally:
            stack.stop()
    finally:
        squatter.close()
