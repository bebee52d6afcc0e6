"""A second verifier, written from docs/evidence-format.md alone, that goes
all the way: strict JSON (§6.1), the witness's cosignature (§4.3), and each
entry decoded by hand from the field table (§2.2) and checked as step 6 says.
It imports nothing of Quire's (its cryptography and proof checks are
``test_evidence_format``'s, which import nothing of Quire's either).

It and ``quire evidence verify`` (the library's ``verify_evidence`` with the
repeated-name check the command adds) must reach the same verdict on every
bundle of a suite of tampered ones: JSON read two ways, entries encoded in
every non-canonical way a reader could decode differently, histories that do
not hold, shown values that lie, and missing or borrowed cosignatures. Only
the bundles are *built* with Quire's library: every entry is in a log signed
by the trusted key and cosigned by the trusted witness, so the verdict rests
on the reading rules, not on a broken proof."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from test_evidence_format import (
    Invalid,
    b64,
    check_consistency,
    check_inclusion,
    checkpoint,
    hash32,
)

# -- the outsider's verifier (no Quire import below this line until the builder) --

TERMINAL = {8, 9, 10, 11}
BEFORE_COMPLETION = {1, 2, 3, 5, 6, 7}
ACCEPTED, COMPLETED = 1, 8
SCALAR_WIRE = {"string": 2, "enum": 0, "int32": 0, "int64": 0, "uint32": 0}
FIELDS: dict[str, dict[int, tuple[str, str, bool]]] = {
    "TransitionEvent": {
        1: ("event_id", "string", False),
        2: ("job", "string", False),
        3: ("tenant", "string", False),
        4: ("from_state", "enum", False),
        5: ("to_state", "enum", False),
        6: ("actor", "Actor", False),
        7: ("attempt", "int32", False),
        8: ("lease_token", "int64", False),
        9: ("reason_code", "string", False),
        10: ("manifest_digest", "string", False),
        11: ("source_digests", "string", True),
        12: ("output_digest", "string", False),
        13: ("ruleset_version", "string", False),
        14: ("key_version", "string", False),
        15: ("certificate_sha256", "string", False),
        16: ("occur_time", "Timestamp", False),
        17: ("item_count", "int32", False),
        18: ("ruleset_digest", "string", False),
        19: ("note", "string", False),
        20: ("signer_identity", "string", False),
        21: ("signature_level", "string", False),
        22: ("generation", "uint32", False),
        23: ("retirement", "Retirement", False),
        24: ("repairs", "SourceRepair", True),
        25: ("reason_detail", "string", False),
        26: ("timings", "PhaseTiming", True),
        27: ("deadline", "Timestamp", False),
        28: ("pins", "SourcePin", True),
        29: ("track", "string", False),
        30: ("disagreements", "PageDisagreement", True),
    },
    "Actor": {
        1: ("service", "string", False),
        2: ("instance", "string", False),
        3: ("build_version", "string", False),
    },
    "Retirement": {
        1: ("kind", "string", False),
        2: ("blob_key", "string", False),
        3: ("sha256", "string", False),
        4: ("size_bytes", "int64", False),
        5: ("rule", "string", False),
        6: ("period_seconds", "int64", False),
        7: ("period_start_time", "Timestamp", False),
    },
    "SourceRepair": {
        1: ("position", "int32", False),
        2: ("sha256", "string", False),
        3: ("normalized_sha256", "string", False),
        4: ("normalized_size_bytes", "int64", False),
        5: ("warnings", "string", True),
    },
    "PageDisagreement": {
        1: ("position", "int32", False),
        2: ("pages", "int32", True),
        3: ("detail", "string", False),
    },
    "PhaseTiming": {
        1: ("stage", "string", False),
        2: ("phase", "string", False),
        3: ("duration", "Timestamp", False),  # Duration: the same two fields
        4: ("source_system", "string", False),
    },
    "SourcePin": {
        1: ("position", "int32", False),
        2: ("system", "string", False),
        3: ("key", "string", False),
        4: ("sha256", "string", False),
        5: ("size_bytes", "int64", False),
        6: ("fetched_sha256", "string", False),
        7: ("schema_version", "string", False),
        8: ("fetch_time", "Timestamp", False),
        9: ("normalisations", "string", True),
    },
    "Timestamp": {1: ("seconds", "int64", False), 2: ("nanos", "int32", False)},
}


def varint(data: bytes, at: int) -> tuple[int, int]:
    """A varint in its fewest bytes (§2.2); (value, next position)."""
    value = shift = 0
    for length in range(1, 11):
        if at >= len(data):
            raise Invalid("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            if byte == 0 and length > 1:
                raise Invalid("a varint not in its fewest bytes")
            return value, at
    raise Invalid("a varint longer than ten bytes")


def scalar(kind: str, value: int) -> int:
    if kind == "uint32":
        if value >= 2**32:
            raise Invalid("a uint32 out of range")
        return value
    signed = value - 2**64 if value >= 2**63 else value
    if kind in ("int32", "enum") and not -(2**31) <= signed < 2**31:
        raise Invalid("an int32 out of range")
    if value >= 2**64:
        raise Invalid("a varint beyond 64 bits")
    return signed


def decode(data: bytes, message: str) -> dict[str, Any]:
    """§2.2 and §6.1: every field known, in its own wire type, in ascending
    number order, a singular field once, no default value written."""
    table, found, at, last = FIELDS[message], {}, 0, 0
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if number not in table:
            raise Invalid(f"{message} has no field {number}")
        name, kind, repeated = table[number]
        if number < last or (number == last and not repeated):
            raise Invalid("fields out of order, or a singular field twice")
        last = number
        if wire != SCALAR_WIRE.get(kind, 2):
            raise Invalid(f"field {number} in the wrong wire type")
        value: Any
        if wire == 0:
            raw, at = varint(data, at)
            value = scalar(kind, raw)
            if value == 0:
                raise Invalid("a default value written")
        else:
            length, at = varint(data, at)
            if at + length > len(data):
                raise Invalid("a length past the end")
            chunk, at = data[at : at + length], at + length
            if kind == "string":
                try:
                    value = chunk.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise Invalid("a string that is not UTF-8") from error
                if not value and not repeated:
                    raise Invalid("a default value written")
            else:
                value = decode(chunk, kind)
        if repeated:
            found.setdefault(name, []).append(value)
        else:
            found[name] = value
    return found


def strict_json(text: str) -> Any:
    """§6.1: no object names a member twice, at any depth."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in items]
        if len(names) != len(set(names)):
            raise Invalid("a member name appears twice")
        return dict(items)

    return json.loads(text, object_pairs_hook=pairs)


def is_int(value: Any) -> bool:
    return type(value) is int


def instant(text: Any) -> tuple[int, int]:
    """An RFC 3339 time as (seconds, nanos) since the epoch."""
    found = re.fullmatch(
        r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", str(text)
    )
    if not isinstance(text, str) or not found:
        raise Invalid("not an RFC 3339 time")
    moment = datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC)
    if found.group(3) != "Z":
        sign = 1 if found.group(3)[0] == "+" else -1
        hours, minutes = map(int, found.group(3)[1:].split(":"))
        moment -= sign * timedelta(hours=hours, minutes=minutes)
    nanos = int((found.group(2) or "").ljust(9, "0") or 0)
    return int(moment.timestamp()), nanos


def check_cosignature(note: str, witness_vkey: str) -> None:
    """§4.3: a cosignature/v1 line by the trusted witness, and every such line verifies."""
    name, hex_id, material = witness_vkey.split("+", 2)
    raw = b64(material)
    if raw[:1] != b"\x04" or len(raw) != 33:
        raise Invalid("not a cosignature/v1 witness key")
    public = raw[1:]
    ident = hashlib.sha256(name.encode() + b"\x0a\x04" + public).digest()[:4]
    if ident.hex() != hex_id:
        raise Invalid("witness key ID does not match")
    cut = note.rfind("\n\n")
    text, lines = note[: cut + 1], note[cut + 2 :].split("\n")[:-1]
    seen = 0
    for line in lines:
        signer, _, encoded = line[2:].partition(" ")
        blob = b64(encoded)
        if signer != name or blob[:4] != ident:
            continue
        if len(blob) != 4 + 8 + 64:
            raise Invalid("a cosignature of the wrong length")
        (stamp,) = struct.unpack(">Q", blob[4:12])
        message = f"cosignature/v1\ntime {stamp}\n".encode() + text.encode()
        try:
            Ed25519PublicKey.from_public_bytes(public).verify(blob[12:], message)
        except InvalidSignature as error:
            raise Invalid("the witness's cosignature does not verify") from error
        seen += 1
    if not seen:
        raise Invalid("no cosignature by the trusted witness")


def outsider_verify(
    text: str, origin: str, public: bytes, witness_vkey: str
) -> list[dict[str, Any]]:
    """Section 7, steps 1 to 6: the decoded entries; Invalid otherwise."""
    evidence = strict_json(text)
    for name in ("format", "origin", "job", "checkpoint"):
        if not isinstance(evidence.get(name), str):
            raise Invalid(f"{name} is not a string")
    if evidence["format"] != "quire-evidence/1" or evidence["origin"] != origin:
        raise Invalid("not quire evidence for this origin")
    size, root = checkpoint(evidence["checkpoint"], origin, public)
    check_cosignature(evidence["checkpoint"], witness_vkey)
    decoded: list[dict[str, Any]] = []
    previous = -1
    for item in evidence["entries"]:
        index = item["index"]
        if not is_int(index) or index <= previous:
            raise Invalid("an index that is not an increasing JSON integer")
        previous = index
        entry = b64(item["entry"])
        check_inclusion(entry, index, size, [hash32(p) for p in item["inclusion_proof"]], root)
        event = decode(entry, "TransitionEvent")
        shown_check(item, event)
        decoded.append(event)
    for item in evidence.get("consistency", []):
        old_size, old_root = checkpoint(item["checkpoint"], origin, public)
        check_consistency(old_size, size, old_root, root, [hash32(p) for p in item["proof"]])
    history_check(decoded, origin.removeprefix("quire/"), evidence["job"])
    return decoded


def shown_check(item: dict[str, Any], event: dict[str, Any]) -> None:
    """Step 6: what an entry shows beside its bytes, when shown, is what they say."""
    if "occur_time" in item:
        shown, stored = item["occur_time"], event.get("occur_time")
        if (shown is None) != (stored is None):
            raise Invalid("occur_time shown is not the entry's")
        if stored is not None and instant(shown) != (
            stored.get("seconds", 0),
            stored.get("nanos", 0),
        ):
            raise Invalid("occur_time shown is not the entry's")
    if "attempt" in item and not (
        is_int(item["attempt"]) and item["attempt"] == event.get("attempt", 0)
    ):
        raise Invalid("attempt shown is not the entry's")
    for name in ("note", "signer_identity", "signature_level", "key_version"):
        if name in item and item[name] != event.get(name, ""):
            raise Invalid(f"{name} shown is not the entry's")


def history_check(events: list[dict[str, Any]], tenant: str, job: str) -> None:
    """Step 6: the job's own entries, a whole history, retirements after an end."""
    if any(e.get("tenant", "") != tenant or e.get("job", "") != job for e in events):
        raise Invalid("an entry of another tenant or job")
    states = {e.get("to_state", 0) for e in events}
    if ACCEPTED not in states:
        raise Invalid("no ACCEPTED")
    if COMPLETED in states and not BEFORE_COMPLETION <= states:
        raise Invalid("a completion without its history")
    ended = {
        e.get("to_state", 0)
        for e in events
        if "retirement" not in e and e.get("to_state", 0) in TERMINAL
    }
    for e in events:
        retired = e.get("reason_code", "") == "BYTES_RETIRED"
        if retired != ("retirement" in e):
            raise Invalid("a retirement with one of its two signs")
        if retired and (
            e.get("from_state", 0) != e.get("to_state", 0) or e.get("to_state", 0) not in ended
        ):
            raise Invalid("bytes retired from a job that had not ended")


# -- bundles, built with Quire's library ------------------------------------------

from quire.checkpoint import Checkpoint, sign_checkpoint  # noqa: E402
from quire.cosignature import cosign, witness_key  # noqa: E402
from quire.evidenceverify import repeated_names, shown_fields, verify_evidence  # noqa: E402 - the builder and the verifier under comparison
from quire.merkle import MerkleTree  # noqa: E402
from quire.transitions import EventFactory  # noqa: E402
from quire.type import queue_pb2  # noqa: E402

TENANT = "00000000000000aa"
ORIGIN = f"quire/{TENANT}"
JOB = "jobs/0000000000000000000000000001"
HISTORY = [
    "ACCEPTED",
    "VALIDATING",
    "REVIEWING",
    "ASSEMBLING",
    "SIGNING",
    "COMMITTING",
    "COMPLETED",
]
FACTORY = EventFactory("signer", "instance-1", "1.0.0")


def _event(previous: str, state: str, **fields: Any) -> queue_pb2.TransitionEvent:
    task = queue_pb2.JobTask(job=JOB, tenant=TENANT, manifest_digest="m" * 64)
    event = FACTORY.transition(task, previous, state, attempt=1, lease_token=7)
    for name, value in fields.items():
        setattr(event, name, value)
    return event


def honest_entries() -> list[bytes]:
    states = ["", *HISTORY]
    return [
        _event(states[i], states[i + 1]).SerializeToString(deterministic=True)
        for i in range(len(HISTORY))
    ]


class Keys:
    def __init__(self) -> None:
        self.audit = Ed25519PrivateKey.generate()
        self.witness = Ed25519PrivateKey.generate()
        self.witness_vkey = witness_key("quire-witness", self.witness.public_key())
        raw = self.audit.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public, self.pin = raw, hashlib.sha256(raw).hexdigest()
        self.pem = (
            self.audit.public_key()
            .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )


def bundle(keys: Keys, job_entries: list[bytes], *, cosigned: bool = True) -> dict[str, Any]:
    """The job's entries in a tenant log (after some other job's), signed,
    cosigned, each shown field read from the entry when it decodes."""
    other = [_event("", "ACCEPTED", job="jobs/other").SerializeToString(deterministic=True)]
    log = other * 3 + job_entries
    tree = MerkleTree.from_entries(log)
    size = len(log)
    text = Checkpoint(ORIGIN, size, tree.root(size)).text()
    note = sign_checkpoint(Checkpoint(ORIGIN, size, tree.root(size)), keys.audit).decode()
    if cosigned:
        note += cosign(text, "quire-witness", keys.witness, 1_790_000_000)
    items = []
    for index in range(3, size):
        item: dict[str, Any] = {
            "index": index,
            "entry": base64.b64encode(log[index]).decode(),
            "inclusion_proof": [base64.b64encode(h).decode() for h in tree.inclusion_proof(index)],
        }
        try:
            item.update(shown_fields(queue_pb2.TransitionEvent.FromString(log[index])))
        except Exception:  # noqa: BLE001 - bytes protobuf cannot read: nothing shown
            pass
        items.append(item)
    return {
        "format": "quire-evidence/1",
        "origin": ORIGIN,
        "job": JOB,
        "checkpoint": note,
        "entries": items,
        "consistency": [],
        "public_key": keys.pem,
        "public_key_sha256": keys.pin,
    }


# -- the tampered suite ----------------------------------------------------------


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _entry(change: Callable[[queue_pb2.TransitionEvent], None]) -> bytes:
    event = queue_pb2.TransitionEvent.FromString(honest_entries()[-1])
    change(event)
    return event.SerializeToString(deterministic=True)


def _retired(**fields: Any) -> bytes:
    retirement = queue_pb2.Retirement(kind="artifact", blob_key="signed/x", sha256="s" * 64)
    event = _event("COMPLETED", "COMPLETED", reason_code="BYTES_RETIRED")
    event.retirement.CopyFrom(retirement)
    for name, value in fields.items():
        if name == "no_retirement":
            event.ClearField("retirement")
        else:
            setattr(event, name, value)
    return event.SerializeToString(deterministic=True)


def _text(document: dict[str, Any]) -> str:
    return json.dumps(document)


def suite(keys: Keys) -> list[tuple[str, str]]:
    """(label, evidence text): honest ones and tampered ones."""
    entries = honest_entries()
    honest = bundle(keys, entries)
    last = entries[-1]
    cases: list[tuple[str, str]] = [("honest", _text(honest))]

    def with_entries(label: str, changed: list[bytes]) -> None:
        cases.append((label, _text(bundle(keys, changed))))

    # Entries that protobuf readers could read differently (§6.1).
    with_entries("unknown field", [*entries[:-1], last + _field(30, b"x")])
    with_entries("fields out of order", [*entries[:-1], _field(2, JOB.encode()) + last])
    with_entries(
        "a singular field twice", [*entries[:-1], last + _field(29, b"a") + _field(29, b"b")]
    )
    with_entries("wrong wire type", [*entries[:-1], last + _key(29, 0) + _varint(5)])
    overlong = _key(17, 0) + b"\x85\x00"
    with_entries("an overlong varint", [*entries[:-1], _splice(last, 17, overlong)])
    with_entries("a default written", [*entries[:-1], _splice(last, 17, _key(17, 0) + b"\x00")])
    actor = queue_pb2.Actor(service="signer", instance="i", build_version="1")
    bad_actor = _field(6, actor.SerializeToString() + _field(9, b"x"))
    with_entries("an unknown field in the actor", [*entries[:-1], _replace(last, 6, bad_actor)])
    with_entries(
        "an int32 out of range", [*entries[:-1], _splice(last, 17, _key(17, 0) + _varint(2**40))]
    )
    # Histories that do not hold (step 6).
    with_entries(
        "another tenant",
        [*entries[:-1], _entry(lambda e: setattr(e, "tenant", "00000000000000bb"))],
    )
    with_entries("another job", [*entries[:-1], _entry(lambda e: setattr(e, "job", "jobs/x"))])
    with_entries("a completion without its history", [entries[0], entries[-1]])
    with_entries("no acceptance", entries[1:])
    with_entries("a retirement after the end", [*entries, _retired()])
    with_entries("a retirement sign alone", [*entries, _retired(no_retirement=True)])
    with_entries("a retirement without its reason", [*entries, _retired(reason_code="")])
    with_entries("a retirement before any end", [*entries[:-1], _retired()])
    with_entries(
        "an odd but canonical entry",
        [*entries[:-1], _entry(lambda e: setattr(e, "track", "candidate"))],
    )

    # JSON read two ways, and shown values (§6, §6.1).
    text = _text(honest)
    note = honest["entries"][0]
    cases.append(
        ("a member named twice", text.replace('"attempt": 1,', '"attempt": 7, "attempt": 1,', 1))
    )
    changed = copy.deepcopy(honest)
    changed["entries"][1]["index"] = str(changed["entries"][1]["index"])
    cases.append(("an index as a string", _text(changed)))
    changed = copy.deepcopy(honest)
    changed["entries"][0]["attempt"] = True
    cases.append(("an attempt as a boolean", _text(changed)))
    changed = copy.deepcopy(honest)
    changed["entries"][0]["note"] = "approved without reading"
    cases.append(("a shown note that lies", _text(changed)))
    changed = copy.deepcopy(honest)
    changed["entries"][0]["occur_time"] = _with_offset(note["occur_time"])
    cases.append(("the same instant spelt with an offset", _text(changed)))
    changed = copy.deepcopy(honest)
    changed["entries"][0]["occur_time"] = "2001-01-01T00:00:00Z"
    cases.append(("another instant", _text(changed)))
    changed = copy.deepcopy(honest)
    for item in changed["entries"]:
        for name in (
            "occur_time",
            "attempt",
            "note",
            "signer_identity",
            "signature_level",
            "key_version",
        ):
            item.pop(name, None)
    cases.append(("nothing shown (an older file)", _text(changed)))

    # Cosignatures (§4.3).
    cases.append(("no cosignature", _text(bundle(keys, entries, cosigned=False))))
    stranger = Keys()
    unwitnessed = bundle(keys, entries, cosigned=False)
    text_only = unwitnessed["checkpoint"].split("\n\n")[0] + "\n"
    unwitnessed["checkpoint"] += cosign(text_only, "quire-witness", stranger.witness, 1_790_000_000)
    cases.append(("another witness's cosignature", _text(unwitnessed)))
    changed = copy.deepcopy(honest)
    lines = changed["checkpoint"].splitlines(keepends=True)
    cosignature = base64.b64decode(lines[-1].split(" ")[-1])
    flipped = cosignature[:12] + bytes([cosignature[12] ^ 1]) + cosignature[13:]
    lines[-1] = "\u2014 quire-witness " + base64.b64encode(flipped).decode() + "\n"
    changed["checkpoint"] = "".join(lines)
    cases.append(("a cosignature that does not verify", _text(changed)))
    return cases


def _with_offset(text: str) -> str:
    """The same instant as ``text`` (UTC, ``Z``), written at +02:00."""
    whole, _, rest = text.rstrip("Z").partition(".")
    moment = datetime.fromisoformat(whole) + timedelta(hours=2)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{rest}" if rest else "") + "+02:00"


def _fields(data: bytes) -> list[tuple[int, bytes]]:
    """An honest entry's fields as (number, whole encoded field), in order."""
    out, at = [], 0
    while at < len(data):
        start = at
        key, at = varint(data, at)
        if key & 7 == 0:
            _, at = varint(data, at)
        else:
            length, at = varint(data, at)
            at += length
        out.append((key >> 3, data[start:at]))
    return out


def _splice(data: bytes, number: int, field: bytes) -> bytes:
    """``data`` with ``field`` (field ``number``) put in its place in number order."""
    fields = [(n, f) for n, f in _fields(data) if n != number] + [(number, field)]
    return b"".join(f for _, f in sorted(fields, key=lambda pair: pair[0]))


def _replace(data: bytes, number: int, field: bytes) -> bytes:
    return _splice(data, number, field)


def quire_verdict(text: str, keys: Keys) -> bool:
    """`quire evidence verify`: the repeated-name check, then the library."""
    if repeated_names(text):
        return False
    return verify_evidence(json.loads(text), keys.pin, witness=keys.witness_vkey) == []


def outsider_verdict(text: str, keys: Keys) -> bool:
    try:
        outsider_verify(text, ORIGIN, keys.public, keys.witness_vkey)
    except (Invalid, KeyError, TypeError, ValueError):
        return False
    return True


EXPECTED_ACCEPTED = {
    "honest",
    "a retirement after the end",
    "an odd but canonical entry",
    "the same instant spelt with an offset",
    "nothing shown (an older file)",
}


def test_both_verifiers_agree_on_every_tampered_bundle() -> None:
    keys = Keys()
    cases = suite(keys)
    assert len(cases) >= 28
    verdicts = {
        label: (quire_verdict(text, keys), outsider_verdict(text, keys)) for label, text in cases
    }
    disagreements = {label: v for label, v in verdicts.items() if v[0] != v[1]}
    assert disagreements == {}
    accepted = {label for label, (quire, _) in verdicts.items() if quire}
    assert accepted == EXPECTED_ACCEPTED


@pytest.mark.parametrize("label", ["honest", "a retirement after the end"])
def test_the_outsider_reads_the_entries_fields(label: str) -> None:
    keys = Keys()
    text = dict(suite(keys))[label]
    events = outsider_verify(text, ORIGIN, keys.public, keys.witness_vkey)
    assert [e["to_state"] for e in events[:7]] == [1, 2, 3, 5, 6, 7, 8]
    assert events[0]["actor"] == {
        "service": "signer",
        "instance": "instance-1",
        "build_version": "1.0.0",
    }
    assert events[0]["lease_token"] == 7 and events[0]["attempt"] == 1
