"""An independent verifier, written from docs/evidence-format.md with only
hashlib, base64, json and cryptography (none of Quire's modules), accepts the
spec's worked example and the evidence Quire's library produces, and refuses
every edit to it. Only the evidence is *built* with Quire's library."""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

# Only to build the evidence under test; the verifier below uses none of Quire.
from quire.checkpoint import Checkpoint, sign_checkpoint
from quire.merkle import MerkleTree

SPEC = Path(__file__).resolve().parent.parent / "docs" / "evidence-format.md"


# -- the verifier: docs/evidence-format.md, sections 3 to 7 ---------------------


class Invalid(Exception):
    """The evidence does not verify."""


def b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise Invalid("not base64") from error


def hash32(text: str) -> bytes:
    value = b64(text)
    if len(value) != 32:
        raise Invalid("not a 32-byte hash")
    return value


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def vkey_public(vkey: str, name: str) -> bytes:
    """Section 4.2: <name>+<hex key ID>+base64(0x01 || public key)."""
    vname, hex_id, material = vkey.split("+", 2)
    raw = b64(material)
    if vname != name or raw[:1] != b"\x01" or len(raw) != 33:
        raise Invalid("not an Ed25519 verifier key for this name")
    if key_id(name, raw[1:]).hex() != hex_id:
        raise Invalid("verifier key ID does not match")
    return raw[1:]


def key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\x0a" + b"\x01" + public).digest()[:4]


def note_text(note: bytes, name: str, public: bytes) -> str:
    """Section 4.2: the text of a note with a valid signature by (name, public)."""
    try:
        whole = note.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Invalid("not UTF-8") from error
    if any(ch < " " and ch != "\n" for ch in whole):
        raise Invalid("control character")
    cut = whole.rfind("\n\n")
    if cut < 0 or not whole.endswith("\n"):
        raise Invalid("no signature block")
    text, block = whole[: cut + 1], whole[cut + 2 :]
    trusted_id = key_id(name, public)
    key = Ed25519PublicKey.from_public_bytes(public)
    verified = 0
    for line in block[:-1].split("\n"):
        if not line.startswith("\u2014 "):
            raise Invalid("not a signature line")
        signer, _, encoded = line[2:].partition(" ")
        raw = b64(encoded)
        if signer != name or raw[:4] != trusted_id:
            continue  # someone else's signature: ignored
        try:
            key.verify(raw[4:], text.encode("utf-8"))
        except InvalidSignature as error:
            raise Invalid("bad signature by the trusted key") from error
        verified += 1
    if not verified:
        raise Invalid("no signature by the trusted key")
    return text


def checkpoint(note: str, origin: str, public: bytes) -> tuple[int, bytes]:
    """Sections 4.1 and 7 steps 2-3: (size, root) of a signed checkpoint."""
    lines = note_text(note.encode("utf-8"), origin, public).split("\n")[:-1]
    if len(lines) < 3 or "" in lines:
        raise Invalid("a checkpoint has three or more non-empty lines")
    if lines[0] != origin:
        raise Invalid("checkpoint of another log")
    if not re.fullmatch(r"0|[1-9][0-9]*", lines[1]):
        raise Invalid("bad size")
    return int(lines[1]), hash32(lines[2])


def check_inclusion(entry: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> None:
    """Section 5.1."""
    if index >= size:
        raise Invalid("index outside the tree")
    fn, sn, r = index, size - 1, leaf_hash(entry)
    for p in proof:
        if sn == 0:
            raise Invalid("inclusion proof too long")
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            while fn % 2 == 0 and fn != 0:
                fn, sn = fn // 2, sn // 2
        else:
            r = node_hash(r, p)
        fn, sn = fn // 2, sn // 2
    if sn != 0 or r != root:
        raise Invalid("inclusion proof fails")


def check_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: list[bytes]
) -> None:
    """Section 5.2."""
    if old_size > new_size:
        raise Invalid("old tree larger than new")
    if old_size == new_size:
        if proof or old_root != new_root:
            raise Invalid("equal sizes need equal roots and no proof")
        return
    if old_size == 0:
        if proof or old_root != hashlib.sha256(b"").digest():
            raise Invalid("an empty tree has the empty root and no proof")
        return
    if not proof:
        raise Invalid("empty consistency proof")
    if old_size & (old_size - 1) == 0:
        proof = [old_root, *proof]
    fn, sn = old_size - 1, new_size - 1
    while fn % 2 == 1:
        fn, sn = fn // 2, sn // 2
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            raise Invalid("consistency proof too long")
        if fn % 2 == 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn % 2 == 0 and fn != 0:
                fn, sn = fn // 2, sn // 2
        else:
            sr = node_hash(sr, c)
        fn, sn = fn // 2, sn // 2
    if fr != old_root or sr != new_root or sn != 0:
        raise Invalid("consistency proof fails")


def verify_evidence(data: str, origin: str, public: bytes) -> list[tuple[int, bytes]]:
    """Section 7, steps 1-5: returns the proven (index, entry bytes)."""
    evidence = json.loads(data)
    if evidence.get("format") != "quire-evidence/1" or evidence.get("origin") != origin:
        raise Invalid("not quire evidence for this origin")
    size, root = checkpoint(evidence["checkpoint"], origin, public)
    proven: list[tuple[int, bytes]] = []
    for item in evidence["entries"]:
        index, entry = item["index"], b64(item["entry"])
        if proven and index <= proven[-1][0]:
            raise Invalid("indices not increasing")
        check_inclusion(entry, index, size, [hash32(p) for p in item["inclusion_proof"]], root)
        proven.append((index, entry))
    for item in evidence.get("consistency", []):
        old_size, old_root = checkpoint(item["checkpoint"], origin, public)
        check_consistency(old_size, size, old_root, root, [hash32(p) for p in item["proof"]])
    return proven


# -- the spec's own example ----------------------------------------------------


def spec_example() -> tuple[str, str, str]:
    """The worked example's verifier key, origin and evidence file, as printed."""
    spec = SPEC.read_text(encoding="utf-8")
    example = spec[spec.index("## 8. Worked example") :]
    vkey = re.search(r"^    (quire/\S+\+[0-9a-f]{8}\+\S+)$", example, re.MULTILINE)
    evidence = re.search(r"```json\n(.*?)```", example, re.DOTALL)
    assert vkey and evidence
    return vkey.group(1), vkey.group(1).split("+")[0], evidence.group(1)


def test_the_worked_example_in_the_spec_verifies() -> None:
    vkey, origin, evidence = spec_example()
    public = vkey_public(vkey, origin)
    assert public.hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    assert verify_evidence(evidence, origin, public) == [(2, b"entry 2")]


def test_the_verifier_reads_the_c2sp_signed_note_example() -> None:
    # From the C2SP signed-note specification (https://c2sp.org/signed-note).
    vkey = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
    note = (
        "This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfX"
        "ppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
    )
    public = vkey_public(vkey, "example.com/foo")
    assert note_text(note.encode(), "example.com/foo", public) == "This is an example message.\n"


# -- evidence that Quire's library builds ----------------------------------------


ORIGIN = "quire/00000000000000aa"


def raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def build_evidence(key: Ed25519PrivateKey, size: int, old_size: int, indices: list[int]) -> str:
    """Evidence as audit would export it, made with quire.merkle and quire.checkpoint."""
    entries = [b"ledger entry %d" % i for i in range(size)]
    tree = MerkleTree.from_entries(entries)

    def signed(at: int) -> str:
        return sign_checkpoint(Checkpoint(ORIGIN, at, tree.root(at)), key).decode()

    def encoded(hashes: list[bytes]) -> list[str]:
        return [base64.b64encode(h).decode() for h in hashes]

    return json.dumps(
        {
            "format": "quire-evidence/1",
            "origin": ORIGIN,
            "job": "job-1",
            "checkpoint": signed(size),
            "entries": [
                {
                    "index": i,
                    "entry": base64.b64encode(entries[i]).decode(),
                    "inclusion_proof": encoded(tree.inclusion_proof(i)),
                }
                for i in indices
            ],
            "consistency": [
                {"checkpoint": signed(old_size), "proof": encoded(tree.consistency_proof(old_size))}
            ],
        }
    )


@pytest.mark.parametrize(
    ("size", "old_size", "indices"),
    [(1, 0, [0]), (2, 1, [0, 1]), (7, 4, [0, 3, 6]), (1000, 999, [0, 511, 999]), (1025, 5, [1024])],
)
def test_library_evidence_verifies_independently(
    size: int, old_size: int, indices: list[int]
) -> None:
    key = Ed25519PrivateKey.generate()
    evidence = build_evidence(key, size, old_size, indices)
    proven = verify_evidence(evidence, ORIGIN, raw_public(key))
    assert proven == [(i, b"ledger entry %d" % i) for i in indices]


def edits(evidence: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """One edited copy of the evidence per way an adversary might try."""
    out: list[tuple[str, dict[str, Any]]] = []

    def edit(label: str) -> dict[str, Any]:
        changed = copy.deepcopy(evidence)
        out.append((label, changed))
        return changed

    entry = evidence["entries"][0]
    edit("entry bytes")["entries"][0]["entry"] = base64.b64encode(b"ledger entry 99").decode()
    edit("index")["entries"][0]["index"] = entry["index"] + 1
    edit("proof element")["entries"][0]["inclusion_proof"][0] = base64.b64encode(
        b"\0" * 32
    ).decode()
    edit("proof truncated")["entries"][0]["inclusion_proof"].pop()
    edit("order")["entries"].reverse()
    note = evidence["checkpoint"]
    size_line = note.split("\n")[1]
    edit("checkpoint size")["checkpoint"] = note.replace(
        f"\n{size_line}\n", f"\n{int(size_line) + 1}\n", 1
    )
    edit("checkpoint origin")["checkpoint"] = note.replace(ORIGIN, "quire/00000000000000bb")
    edit("signature")["checkpoint"] = note[:-10] + ("A" if note[-10] != "A" else "B") + note[-9:]
    edit("unsigned")["checkpoint"] = note.split("\n\n")[0] + "\n\n"
    edit("consistency proof")["consistency"][0]["proof"][-1] = base64.b64encode(b"\1" * 32).decode()
    edit("format")["format"] = "quire-evidence/2"
    return out


def test_every_edit_to_the_evidence_is_refused() -> None:
    key = Ed25519PrivateKey.generate()
    evidence = json.loads(build_evidence(key, 300, 200, [17, 250]))
    for label, changed in edits(evidence):
        with pytest.raises(Invalid):
            verify_evidence(json.dumps(changed), ORIGIN, raw_public(key))
            pytest.fail(f"edited {label} still verifies")


def test_evidence_under_another_key_or_origin_is_refused() -> None:
    key = Ed25519PrivateKey.generate()
    evidence = build_evidence(key, 50, 10, [3])
    with pytest.raises(Invalid):
        verify_evidence(evidence, ORIGIN, raw_public(Ed25519PrivateKey.generate()))
    with pytest.raises(Invalid):
        verify_evidence(
            evidence.replace(ORIGIN, "quire/00000000000000bb"),
            "quire/00000000000000bb",
            raw_public(key),
        )


def test_a_forked_log_fails_the_consistency_check() -> None:
    """Two checkpoints signed by the same key over logs that disagree on one
    old entry: the consistency proof from the rewritten log does not verify."""
    key = Ed25519PrivateKey.generate()
    honest = json.loads(build_evidence(key, 40, 20, [30]))
    rewritten = [b"ledger entry %d" % i for i in range(20)]
    rewritten[7] = b"ledger entry 7, edited"
    old_root = MerkleTree.from_entries(rewritten).root()
    honest["consistency"][0]["checkpoint"] = sign_checkpoint(
        Checkpoint(ORIGIN, 20, old_root), key
    ).decode()
    with pytest.raises(Invalid, match="consistency"):
        verify_evidence(json.dumps(honest), ORIGIN, raw_public(key))
