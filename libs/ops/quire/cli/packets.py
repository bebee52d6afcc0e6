"""Sending a packet: files in order, or a manifest file naming them.

A source is a PDF, or a structured source (JSON: an invoice's lines, say),
which the validator checks against the job's ruleset and the assembler
renders by the job's render profile. A file is declared by its name:
``.json`` is ``application/json``, anything else ``application/pdf`` (a
manifest may say ``content_type`` itself); admission sniffs the bytes either
way and refuses a declaration they contradict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from quire.admission.v1 import admission_service_pb2 as pb
from quire.cli.errors import CliError
from quire.cli.progress import upload_progress
from quire.client import INLINE_LIMIT_BYTES, AdmissionClient, PacketItem, inline_source
from quire.type import job_pb2

__all__ = ["PacketFile", "declared_type", "packet_files", "read_manifest_file", "send_packet"]

PDF = "application/pdf"
JSON = "application/json"


def declared_type(path: Path) -> str:
    """The content type a file is sent as, from its name."""
    return JSON if path.suffix.lower() == ".json" else PDF


@dataclass(frozen=True)
class PacketFile:
    document_id: str
    path: Path
    position: int
    content_type: str = PDF


def packet_files(names: list[str]) -> list[PacketFile]:
    """``quire submit FILE...``: each file in the order given, named by its stem."""
    paths = [Path(name).resolve() for name in names]
    return [PacketFile(p.stem, p, i, declared_type(p)) for i, p in enumerate(paths)]


def _manifest_file(base: Path, doc: dict[str, object], index: int) -> PacketFile:
    file = (base / str(doc["file"])).resolve()
    return PacketFile(
        document_id=str(doc["document_id"]),
        path=file,
        position=int(str(doc.get("position", index))),
        content_type=str(doc.get("content_type") or declared_type(file)),
    )


def read_manifest_file(path: Path) -> tuple[list[PacketFile], dict[str, str]]:
    """``{"documents": [{"document_id", "file", "position", "content_type"}],
    "ruleset", "render_profile", "request_id"}`` (``content_type`` is optional)."""
    try:
        spec = json.loads(path.read_text())
        files = [
            _manifest_file(path.parent, doc, index) for index, doc in enumerate(spec["documents"])
        ]
    except json.JSONDecodeError as error:
        raise CliError(f"{path} is not JSON: line {error.lineno}: {error.msg}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CliError(
            f"{path} is not a manifest: want documents: [{{document_id, file, position}}]"
            f" ({type(error).__name__}: {error})"
        ) from None
    options = {
        key: str(spec[key]) for key in ("ruleset", "render_profile", "request_id") if key in spec
    }
    return files, options


def _check_readable(files: list[PacketFile]) -> int:
    """The packet's total size; a missing file fails here, before anything is sent."""
    total = 0
    for packet_file in files:
        if not packet_file.path.is_file():
            raise CliError(f"no such file: {packet_file.path}")
        total += packet_file.path.stat().st_size
    return total


async def send_packet(
    client: AdmissionClient,
    files: list[PacketFile],
    options: dict[str, str] | None = None,
    *,
    show_progress: bool = False,
) -> job_pb2.Job:
    options = options or {}
    total = _check_readable(files)
    items = []
    inline: list[pb.InlineSource] = []
    if total <= INLINE_LIMIT_BYTES:
        # One call: the files ride in SubmitJob, through the same gate as uploads.
        carried: dict[str, pb.InlineSource] = {}
        for packet_file in files:
            source = inline_source(packet_file.path.read_bytes(), packet_file.content_type)
            carried.setdefault(source.header.sha256, source)  # the same file once
            items.append(PacketItem(packet_file.document_id, source.header.sha256))
        inline = list(carried.values())
    else:
        await _upload_each(client, files, items, total, show_progress)
    return await client.submit(
        items,
        positions=[f.position for f in files],
        request_id=options.get("request_id"),
        ruleset=options.get("ruleset", ""),
        render_profile=options.get("render_profile", ""),
        inline=inline,
    )


async def _upload_each(
    client: AdmissionClient,
    files: list[PacketFile],
    items: list[PacketItem],
    total: int,
    show_progress: bool,
) -> None:
    with upload_progress(total, len(files), enabled=show_progress) as progress:
        for packet_file in files:
            source = await client.upload(packet_file.path, packet_file.content_type)
            items.append(PacketItem(packet_file.document_id, source.sha256))
            progress.advance(packet_file.path.stat().st_size)
