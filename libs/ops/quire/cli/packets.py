"""Sending a packet: files in order, or a manifest file naming them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from quire.client import AdmissionClient, PacketItem
from quire.type import job_pb2

__all__ = ["PacketFile", "read_manifest_file", "send_packet"]


@dataclass(frozen=True)
class PacketFile:
    document_id: str
    path: Path
    position: int


def read_manifest_file(path: Path) -> tuple[list[PacketFile], dict[str, str]]:
    """``{"documents": [{"document_id", "file", "position"}], "ruleset", "render_profile", "request_id"}``."""
    spec = json.loads(path.read_text())
    files = [
        PacketFile(
            document_id=str(doc["document_id"]),
            path=(path.parent / str(doc["file"])).resolve(),
            position=int(doc.get("position", index)),
        )
        for index, doc in enumerate(spec["documents"])
    ]
    options = {
        key: str(spec[key]) for key in ("ruleset", "render_profile", "request_id") if key in spec
    }
    return files, options


async def send_packet(
    client: AdmissionClient, files: list[PacketFile], options: dict[str, str] | None = None
) -> job_pb2.Job:
    options = options or {}
    items = []
    for packet_file in files:
        source = await client.upload(packet_file.path)
        items.append(PacketItem(packet_file.document_id, source.sha256))
    return await client.submit(
        items,
        positions=[f.position for f in files],
        request_id=options.get("request_id"),
        ruleset=options.get("ruleset", ""),
        render_profile=options.get("render_profile", ""),
    )
