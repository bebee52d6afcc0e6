"""What ``quire batch submit`` reads: a folder of packet folders, or a manifest.

- A folder: each subfolder (in sorted order) is one packet, its name the
  packet's ``bundle_id``. A subfolder with a ``manifest.json`` is read as
  ``quire submit --manifest`` reads one (documents, positions, ruleset); one
  without is its PDF files in sorted name order, each named by its stem, as
  ``quire submit FILE...`` sends them.
- A manifest file: ``{"packets": [{"bundle_id", "items": [{"position",
  "document_id", "file" | "sha256"}], "ruleset", "render_profile"}]}`` (the
  format SubmitBatch takes as an uploaded manifest), where an item names a
  file relative to the manifest, or the sha256 of a source already uploaded.

Nothing is sent here: the whole batch is read and checked first, so a typo in
packet 4,000 fails before the first upload.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quire.cli.errors import CliError
from quire.cli.packets import read_manifest_file

__all__ = ["BatchItem", "BatchEntry", "read_batch", "read_packet_folders", "read_batch_manifest"]

PACKET_MANIFEST = "manifest.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class BatchItem:
    """One document of a packet: a local file to upload, or a source's sha256."""

    position: int
    document_id: str
    path: Path | None = None
    sha256: str = ""


@dataclass(frozen=True)
class BatchEntry:
    """One packet of the batch, as read from disk."""

    bundle_id: str
    items: tuple[BatchItem, ...]
    ruleset: str = ""
    render_profile: str = ""


def read_batch(path: Path) -> list[BatchEntry]:
    """A folder of packet folders, or a batch manifest file."""
    if path.is_dir():
        return read_packet_folders(path)
    if path.is_file():
        return read_batch_manifest(path)
    raise CliError(f"no such folder or manifest: {path}")


def read_packet_folders(folder: Path) -> list[BatchEntry]:
    packets = [_read_packet_folder(sub) for sub in sorted(folder.iterdir()) if _is_packet(sub)]
    if not packets:
        raise CliError(f"nothing to submit: {folder} has no packet folders")
    return packets


def _is_packet(path: Path) -> bool:
    return path.is_dir() and not path.name.startswith(".")


def _read_packet_folder(folder: Path) -> BatchEntry:
    if (folder / PACKET_MANIFEST).is_file():
        files, options = read_manifest_file(folder / PACKET_MANIFEST)
        items = tuple(BatchItem(f.position, f.document_id, path=f.path) for f in files)
        ruleset, render_profile = options.get("ruleset", ""), options.get("render_profile", "")
    else:
        pdfs = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() == ".pdf")
        items = tuple(BatchItem(i, p.stem, path=p.resolve()) for i, p in enumerate(pdfs))
        ruleset = render_profile = ""
    if not items:
        raise CliError(f"packet {folder.name}: no PDF files and no {PACKET_MANIFEST}")
    return BatchEntry(folder.name, items, ruleset=ruleset, render_profile=render_profile)


def read_batch_manifest(path: Path) -> list[BatchEntry]:
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise CliError(f"{path} is not JSON: line {error.lineno}: {error.msg}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path} is not JSON: not UTF-8 text") from None
    packets = spec.get("packets") if isinstance(spec, dict) else None
    if not isinstance(packets, list) or not packets:
        raise CliError(f"{path} is not a batch manifest: want packets: [{{bundle_id, items}}]")
    return [
        _manifest_packet(path.parent, packet, f"packets[{i}]") for i, packet in enumerate(packets)
    ]


def _manifest_packet(base: Path, packet: Any, where: str) -> BatchEntry:
    if not isinstance(packet, dict) or not isinstance(packet.get("items"), list):
        raise CliError(f"{where}: want {{bundle_id, items: [...], ruleset, render_profile}}")
    if not packet["items"]:
        raise CliError(f"{where}.items: a packet needs at least one item")
    items = tuple(
        _manifest_item(base, item, index, f"{where}.items[{index}]")
        for index, item in enumerate(packet["items"])
    )
    return BatchEntry(
        bundle_id=str(packet.get("bundle_id", "")),
        items=items,
        ruleset=str(packet.get("ruleset", "")),
        render_profile=str(packet.get("render_profile", "")),
    )


def _manifest_item(base: Path, item: Any, index: int, where: str) -> BatchItem:
    if not isinstance(item, dict) or "document_id" not in item:
        raise CliError(f"{where}: want {{position, document_id, file or sha256}}")
    try:
        position = int(item.get("position", index))
    except (TypeError, ValueError):
        raise CliError(f"{where}.position: not a whole number") from None
    has_file, has_digest = "file" in item, "sha256" in item
    if has_file == has_digest:
        raise CliError(f"{where}: give either file or sha256")
    if has_digest:
        digest = str(item["sha256"]).lower()
        if not _SHA256.fullmatch(digest):
            raise CliError(f"{where}.sha256: not a sha256 (64 hex digits)")
        return BatchItem(position, str(item["document_id"]), sha256=digest)
    return BatchItem(position, str(item["document_id"]), path=(base / str(item["file"])).resolve())
