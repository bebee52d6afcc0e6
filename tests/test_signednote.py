"""C2SP signed notes: Quire signs byte for byte as the reference implementation
does, verifies the spec's own example, ignores other keys' signatures, and
refuses a malformed note or a signature that does not verify."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quire.signednote import (
    NoteError,
    key_id,
    parse_note,
    parse_verifier_key,
    sign_note,
    verifier_key,
    verify_note,
)

# From the C2SP signed-note specification, "Verifier keys / Example"
# (https://c2sp.org/signed-note, github.com/C2SP/C2SP signed-note.md).
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n"
    "\n"
    "— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
).encode()

# From golang.org/x/mod/sumdb/note, note_test.go (TestSign, TestOpen): a signer
# key with its seed, the matching verifier keys, and the exact signed output.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_PETER_SIG = "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
GO_ENOCH_SIG = "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"


def go_signer() -> Ed25519PrivateKey:
    """The Go test key: ``PRIVATE+KEY+<name>+<id>+base64(0x01 || seed)``."""
    material = base64.b64decode(GO_SKEY.split("+", 4)[4])
    assert material[0] == 0x01
    return Ed25519PrivateKey.from_private_bytes(material[1:])


def test_signing_matches_the_go_reference_byte_for_byte() -> None:
    assert (
        sign_note(GO_TEXT, "PeterNeumann", go_signer()) == (GO_TEXT + "\n" + GO_PETER_SIG).encode()
    )


def test_key_id_and_verifier_key_match_the_go_reference() -> None:
    public = go_signer().public_key()
    assert key_id("PeterNeumann", public).hex() == "c74f20a3"
    assert verifier_key("PeterNeumann", public) == GO_PETER_VKEY
    name, parsed = parse_verifier_key(GO_PETER_VKEY)
    assert name == "PeterNeumann" and verifier_key(name, parsed) == GO_PETER_VKEY


def test_the_c2sp_example_verifies() -> None:
    name, public = parse_verifier_key(C2SP_VKEY)
    note = verify_note(C2SP_NOTE, name, public)
    assert note.text == "This is an example message.\n"


def test_signatures_by_other_keys_are_ignored() -> None:
    data = (GO_TEXT + "\n" + GO_PETER_SIG + GO_ENOCH_SIG).encode()
    for vkey in (GO_PETER_VKEY, GO_ENOCH_VKEY):
        name, public = parse_verifier_key(vkey)
        assert verify_note(data, name, public).text == GO_TEXT
    assert len(parse_note(data).signatures) == 2


def test_a_note_without_the_trusted_signature_is_refused() -> None:
    name, public = parse_verifier_key(GO_PETER_VKEY)
    with pytest.raises(NoteError, match="no signature"):
        verify_note((GO_TEXT + "\n" + GO_ENOCH_SIG).encode(), name, public)
    renamed = GO_PETER_SIG.replace("PeterNeumann", "PeterNeuman")
    with pytest.raises(NoteError, match="no signature"):
        verify_note((GO_TEXT + "\n" + renamed).encode(), name, public)


def test_an_edited_text_or_signature_is_refused() -> None:
    name, public = parse_verifier_key(GO_PETER_VKEY)
    edited = GO_TEXT.replace("answer", "Answer")
    with pytest.raises(NoteError, match="does not verify"):
        verify_note((edited + "\n" + GO_PETER_SIG).encode(), name, public)
    corrupted = GO_PETER_SIG[:60] + "ABCD" + GO_PETER_SIG[64:]
    with pytest.raises(NoteError, match="does not verify"):
        verify_note((GO_TEXT + "\n" + corrupted).encode(), name, public)
    # one good and one bad signature by the trusted key: the note is refused
    with pytest.raises(NoteError, match="does not verify"):
        verify_note((GO_TEXT + "\n" + GO_PETER_SIG + corrupted).encode(), name, public)


@pytest.mark.parametrize(
    "data",
    [
        GO_TEXT,
        GO_TEXT + "\n",
        GO_TEXT + "\n" + GO_PETER_SIG[:-1],
        "\x01" + GO_TEXT + "\n" + GO_PETER_SIG,
        GO_TEXT + "\n" + GO_PETER_SIG.replace("PeterNeumann", "Peter Neumann"),
        GO_TEXT + "\n" + GO_PETER_SIG.replace("PeterNeumann", "Peter+Neumann"),
        GO_TEXT + "\n" + GO_PETER_SIG + "Unexpected line.\n",
        GO_TEXT + "\n" + GO_PETER_SIG.replace("— ", "- "),
        GO_TEXT + "\n" + "— PeterNeumann AAAA\n",
        GO_TEXT + "\n" + GO_PETER_SIG * 101,
    ],
    ids=[
        "no-signatures",
        "blank-line-only",
        "no-final-newline",
        "control-character",
        "space-in-name",
        "plus-in-name",
        "trailing-line",
        "hyphen-not-em-dash",
        "signature-too-short",
        "too-many-signatures",
    ],
)
def test_a_malformed_note_is_refused(data: str) -> None:
    with pytest.raises(NoteError):
        parse_note(data.encode())


def test_invalid_utf8_is_refused() -> None:
    with pytest.raises(NoteError):
        parse_note(b"\xff" + (GO_TEXT + "\n" + GO_PETER_SIG).encode())


def test_only_well_formed_text_is_signed() -> None:
    key = Ed25519PrivateKey.generate()
    with pytest.raises(NoteError):
        sign_note("no final newline", "quire/t", key)
    with pytest.raises(NoteError):
        sign_note("tab\there\n", "quire/t", key)
    for bad_name in ("", "a b", "a+b"):
        with pytest.raises(NoteError):
            sign_note("text\n", bad_name, key)


def test_a_text_with_blank_lines_round_trips() -> None:
    key = Ed25519PrivateKey.generate()
    text = "first\n\nthird\n\n"
    note = verify_note(sign_note(text, "quire/t", key), "quire/t", key.public_key())
    assert note.text == text


def test_a_verifier_key_with_a_wrong_id_is_refused() -> None:
    with pytest.raises(NoteError):
        parse_verifier_key(GO_PETER_VKEY.replace("c74f20a3", "c74f20a4"))
    with pytest.raises(NoteError):
        parse_verifier_key(GO_PETER_VKEY.replace("PeterNeumann", "PeterNeuman"))
    with pytest.raises(NoteError):
        parse_verifier_key("PeterNeumann+c74f20a3+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
