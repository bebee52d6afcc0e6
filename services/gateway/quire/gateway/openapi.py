"""``python -m quire.gateway.openapi``: print the gateway's OpenAPI document
as it is committed (``services/gateway/openapi.json``; ``make openapi``)."""

from __future__ import annotations

import asyncio
import json
import sys

from quire.gateway.app import create_app
from quire.gateway.config import GatewaySettings
from quire.tls import aio_channel

__all__ = ["render"]


def render(document: dict[str, object]) -> str:
    """The document's committed text: stable key order, two-space indent."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


async def _document() -> dict[str, object]:
    settings = GatewaySettings()
    channel = aio_channel(settings.admission_address, None)  # never called: nothing connects
    try:
        return create_app(settings, channel).openapi()
    finally:
        await channel.close()


if __name__ == "__main__":
    sys.stdout.write(render(asyncio.run(_document())))
