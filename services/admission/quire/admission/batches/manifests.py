"""A batch's packets: read from an uploaded JSON manifest, and checked — each
packet's manifest exactly as ``SubmitJob`` checks one, every violation named
by its packet (``packets[3].manifest.items[1].sha256``, AIP-193)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from quire.admission.jobs.intake import bundle_id_violations
from quire.admission.jobs.manifests import check_manifest
from quire.admission.v1 import batch_pb2
from quire.errors import FieldViolation, InvalidInput
from quire.reasons import ReasonCode
from quire.type import job_pb2

__all__ = ["packets_from_json", "check_packets", "bundle_ids"]

SOURCE_FIELD = "manifest_sha256"


def _refused(description: str, reason: str = "BAD_BATCH_MANIFEST") -> InvalidInput:
    return InvalidInput(
        ReasonCode.INVALID_MANIFEST,
        "the batch manifest is invalid",
        (FieldViolation(SOURCE_FIELD, description, reason),),
    )


def _item(raw: Any) -> job_pb2.ManifestItem:
    if not isinstance(raw, dict):
        raise _refused("every item must be an object")
    position, document_id = raw.get("position"), raw.get("document_id")
    sha256, source = raw.get("sha256", ""), raw.get("source")
    if not isinstance(position, int) or isinstance(position, bool):
        raise _refused("every item needs an integer position")
    if not isinstance(document_id, str) or not isinstance(sha256, str):
        raise _refused("every item needs document_id and sha256 strings")
    item = job_pb2.ManifestItem(position=position, document_id=document_id, sha256=sha256)
    if source is not None:  # named by reference: {"system", "key", "content_type"}
        fields = ("system", "key", "content_type")
        if not isinstance(source, dict) or not all(
            isinstance(source.get(name, ""), str) for name in fields
        ):
            raise _refused("an item's source must be an object of system, key, content_type")
        item.source.CopyFrom(
            job_pb2.SourceReference(**{name: source.get(name, "") for name in fields})
        )
    return item


def _packet(raw: Any) -> batch_pb2.BatchPacket:
    if not isinstance(raw, dict) or not isinstance(raw.get("items"), list):
        raise _refused("every packet must be an object with an items list")
    texts = {key: raw.get(key, "") for key in ("bundle_id", "ruleset", "render_profile")}
    if not all(isinstance(value, str) for value in texts.values()):
        raise _refused("bundle_id, ruleset and render_profile must be strings")
    if not all(isinstance(p, int) and -(2**31) <= p < 2**31 for p in _positions(raw["items"])):
        raise _refused("positions must be 32-bit integers")
    return batch_pb2.BatchPacket(
        bundle_id=texts["bundle_id"],
        manifest=job_pb2.Manifest(
            items=[_item(item) for item in raw["items"]],
            ruleset=texts["ruleset"],
            render_profile=texts["render_profile"],
        ),
    )


def _positions(items: list[Any]) -> list[Any]:
    return [item.get("position") for item in items if isinstance(item, dict)]


def packets_from_json(data: bytes, *, max_packets: int) -> list[batch_pb2.BatchPacket]:
    """``{"packets": [{"bundle_id", "items": [...], "ruleset", "render_profile"}]}``;
    an item is ``{"position", "document_id", "sha256"}`` or, for a source
    named by reference, ``{"position", "document_id", "source": {"system",
    "key", "content_type"}}``."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise _refused("not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("packets"), list):
        raise _refused('expected {"packets": [...]}')
    if len(document["packets"]) > max_packets:
        raise _refused(f"at most {max_packets} packets", "TOO_MANY_PACKETS")
    return [_packet(raw) for raw in document["packets"]]


def bundle_ids(packets: Sequence[batch_pb2.BatchPacket]) -> list[str]:
    """Each packet's bundle_id; a packet without one is known by its index."""
    return [packet.bundle_id or str(index) for index, packet in enumerate(packets)]


def check_packets(
    packets: Sequence[batch_pb2.BatchPacket],
    *,
    uploaded: Mapping[str, object],
    max_items: int,
    max_packets: int,
    rulesets: frozenset[str],
    systems: Mapping[str, Any] | None = None,
) -> list[FieldViolation]:
    """Every violation of every packet, each path naming its packet;
    ``systems`` are the tenant's registered source systems the packets name."""
    if not packets:
        return [FieldViolation("packets", "at least one packet is required", "EMPTY")]
    if len(packets) > max_packets:
        return [FieldViolation("packets", f"at most {max_packets} packets", "TOO_MANY_PACKETS")]
    violations: list[FieldViolation] = []
    seen: set[str] = set()
    for index, (packet, bundle) in enumerate(zip(packets, bundle_ids(packets), strict=True)):
        field = f"packets[{index}]"
        violations += bundle_id_violations(packet.bundle_id, f"{field}.bundle_id")
        if bundle in seen:
            violations.append(
                FieldViolation(
                    f"{field}.bundle_id", "bundle_id is not unique", "DUPLICATE_BUNDLE_ID"
                )
            )
        seen.add(bundle)
        for violation in check_manifest(
            packet.manifest,
            uploaded=uploaded,
            max_items=max_items,
            rulesets=rulesets,
            systems=systems,
        ):
            violations.append(
                FieldViolation(
                    f"{field}.{violation.field}", violation.description, violation.reason
                )
            )
    return violations
