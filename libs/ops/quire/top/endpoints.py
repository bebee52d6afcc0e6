"""Where ``quire top`` scrapes: the addresses the embedded stack wrote in
``stack.json``, or ones given as ``--endpoint SERVICE=HOST:PORT`` (a pod's
port-forward, say). A service may be named more than once: replicas."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Endpoint", "endpoint_option", "stack_endpoints"]

STACK_FILE = "stack.json"  # as quire.stack.supervisor writes it (not imported: it is heavy)


@dataclass(frozen=True)
class Endpoint:
    """One process's metrics address, and the service it belongs to."""

    service: str
    address: str

    @property
    def url(self) -> str:
        if self.address.startswith(("http://", "https://")):
            return self.address
        return f"http://{self.address}/metrics"


def endpoint_option(text: str) -> Endpoint:
    """``SERVICE=HOST:PORT`` (or ``SERVICE=URL``), as ``--endpoint`` takes it."""
    service, sep, address = text.partition("=")
    service, address = service.strip(), address.strip()
    if not sep or not service or not address:
        raise argparse.ArgumentTypeError(f"expected SERVICE=HOST:PORT, got {text!r}")
    if not address.startswith(("http://", "https://")):
        host, colon, port = address.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise argparse.ArgumentTypeError(
                f"expected HOST:PORT after {service}=, got {address!r}"
            )
    return Endpoint(service, address)


def stack_endpoints(data_dir: Path) -> tuple[Endpoint, ...]:
    """The metrics addresses in ``<data_dir>/stack.json``; none when the file
    is missing or names none (a stack from before metrics)."""
    path = data_dir / STACK_FILE
    try:
        written = json.loads(path.read_text())
    except (OSError, ValueError):
        return ()
    addresses = written.get("metrics_endpoints") or {}
    return tuple(Endpoint(service, address) for service, address in sorted(addresses.items()))
