"""C2SP tlog checkpoints: written and read exactly as the spec lays them out,
signed under the log's origin, and refused when edited, non-canonical, or
from another log."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quire.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from quire.signednote import NoteError

# The body of the example in the C2SP tlog-checkpoint specification.
C2SP_BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"

ROOT = hashlib.sha256(b"a root").digest()


def test_the_c2sp_example_body_parses_and_is_written_back_identically() -> None:
    checkpoint = Checkpoint.parse(C2SP_BODY)
    assert checkpoint.origin == "example.com/behind-the-sofa"
    assert checkpoint.size == 20852163
    assert checkpoint.root_hash == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert checkpoint.extensions == ()
    assert checkpoint.text() == C2SP_BODY


def test_the_body_is_origin_size_root_and_extensions_one_per_line() -> None:
    checkpoint = Checkpoint("quire/0123abcd", 0, ROOT, ("ext one",))
    root_b64 = base64.b64encode(ROOT).decode()
    assert checkpoint.text() == f"quire/0123abcd\n0\n{root_b64}\next one\n"
    assert Checkpoint.parse(checkpoint.text()) == checkpoint


def test_a_signed_checkpoint_opens_under_its_origin() -> None:
    key = Ed25519PrivateKey.generate()
    checkpoint = Checkpoint("quire/0123abcd", 42, ROOT)
    data = sign_checkpoint(checkpoint, key)
    assert data.decode().split("\n")[4].startswith("— quire/0123abcd ")
    assert open_checkpoint(data, "quire/0123abcd", key.public_key()) == checkpoint


def test_another_logs_checkpoint_is_refused() -> None:
    key = Ed25519PrivateKey.generate()
    data = sign_checkpoint(Checkpoint("quire/aaaa", 42, ROOT), key)
    with pytest.raises(NoteError):
        open_checkpoint(data, "quire/bbbb", key.public_key())
    # even when signed under the expected key name
    named = sign_checkpoint(Checkpoint("quire/aaaa", 42, ROOT), key, name="quire/bbbb")
    with pytest.raises(NoteError, match="another log"):
        open_checkpoint(named, "quire/bbbb", key.public_key())


def test_an_edited_checkpoint_is_refused() -> None:
    key = Ed25519PrivateKey.generate()
    data = sign_checkpoint(Checkpoint("quire/0123abcd", 42, ROOT), key)
    with pytest.raises(NoteError):
        open_checkpoint(data.replace(b"\n42\n", b"\n43\n"), "quire/0123abcd", key.public_key())
    with pytest.raises(NoteError):
        open_checkpoint(data, "quire/0123abcd", Ed25519PrivateKey.generate().public_key())


@pytest.mark.parametrize(
    "body",
    [
        "quire/t\n42\n" + base64.b64encode(ROOT).decode(),  # no final newline
        "quire/t\n42\n",  # no root
        "quire/t\n042\n" + base64.b64encode(ROOT).decode() + "\n",  # leading zero
        "quire/t\n+42\n" + base64.b64encode(ROOT).decode() + "\n",
        "quire/t\n4_2\n" + base64.b64encode(ROOT).decode() + "\n",
        "quire/t\n\u0664\u0662\n" + base64.b64encode(ROOT).decode() + "\n",  # Arabic digits
        "quire/t\n18446744073709551616\n" + base64.b64encode(ROOT).decode() + "\n",
        "quire/t\n42\n" + base64.b64encode(ROOT[:31]).decode() + "\n",  # short root
        "quire/t\n42\n" + base64.b64encode(ROOT).decode().rstrip("=") + "\n",  # unpadded
        "quire/t\n42\n" + base64.b64encode(ROOT).decode() + "\n\n",  # empty extension
        "\n42\n" + base64.b64encode(ROOT).decode() + "\n",  # empty origin
    ],
)
def test_a_non_canonical_body_is_refused(body: str) -> None:
    with pytest.raises(NoteError):
        Checkpoint.parse(body)
