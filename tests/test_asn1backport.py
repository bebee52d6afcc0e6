"""asn1crypto's re-encoding fix, backported (``quire.asn1backport``): a built
structure is encoded once until it changes, a change below it is still seen,
and a signature container encodes to the same bytes as without the fix."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from asn1crypto import core

from quire.asn1backport import mend

_CONTAINER = textwrap.dedent(
    """
    import asyncio, hashlib, sys
    from pathlib import Path
    from asn1crypto import cms
    from pyhanko.sign import signers
    from pyhanko.sign.general import simple_cms_attribute
    from quire.asn1backport import mend, mended

    if sys.argv[2] == "mended":
        mend()
    keys = Path(sys.argv[1])

    class FixedSignature(signers.SimpleSigner):
        # The signature value itself is random; the container around it is not.
        async def async_sign_raw(self, data, digest_algorithm, dry_run=False):
            return hashlib.sha512(data).digest()

    signer = signers.SimpleSigner.load(str(keys / "key.pem"), str(keys / "cert.pem"))
    signer.__class__ = FixedSignature  # load() makes a SimpleSigner whatever it is called on
    container = asyncio.run(
        signer.async_sign(hashlib.sha256(b"packet").digest(), "sha256", use_pades=True)
    )
    first = container.dump()
    # A change deep inside, after the whole was encoded once.
    container["content"]["signer_infos"][0]["unsigned_attrs"] = cms.CMSAttributes(
        [simple_cms_attribute("content_type", "data")]
    )
    print(mended(), hashlib.sha256(first).hexdigest(), hashlib.sha256(container.dump()).hexdigest())
    """
)


def _container(keys: Path, mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _CONTAINER, str(keys), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.split()


def test_a_signature_container_encodes_to_the_same_bytes_with_the_fix(tmp_path: Path) -> None:
    from quire.signer.keystore import GeneratedKeys

    _version, key, _cert = GeneratedKeys(tmp_path / "keys").new_version(1, rotating=False)
    keys = key.parent
    stock_mended, stock_first, stock_changed = _container(keys, "stock")
    fixed_mended, fixed_first, fixed_changed = _container(keys, "mended")
    assert (stock_mended, fixed_mended) == ("False", "True")
    assert fixed_first == stock_first
    assert fixed_changed == stock_changed != stock_first  # the change below was seen


class _Counted(core.Sequence):
    encodings = 0

    def _set_contents(self, force: bool = False) -> None:
        type(self).encodings += 1
        super()._set_contents(force=force)


_Counted._fields = [("child", _Counted, {"optional": True})]


def _nested(levels: int) -> _Counted:
    value = _Counted.load(b"\x30\x00")
    for _ in range(levels):
        value = _Counted({"child": value})
    return value


def test_a_built_structure_is_encoded_once_until_it_changes() -> None:
    mend()
    value = _nested(12)
    _Counted.encodings = 0
    first = value.dump()
    again = value.dump()
    assert first == again
    # Without the fix each level is encoded again at every read of its
    # parent's encoding: thousands of times for twelve levels.
    assert _Counted.encodings <= 2


def test_a_change_below_an_encoded_structure_is_encoded() -> None:
    mend()
    inner = _Counted.load(b"\x30\x00")
    outer = _Counted({"child": inner})
    before = outer.dump()
    inner["child"] = _Counted.load(b"\x30\x00")
    assert outer.dump() == b"0\x040\x020\x00" != before


def test_a_set_changed_after_encoding_keeps_its_order() -> None:
    mend()

    class Numbers(core.SetOf):
        _child_spec = core.Integer

    numbers = Numbers([3, 1])
    assert numbers.dump() == b"1\x06\x02\x01\x01\x02\x01\x03"
    numbers.append(2)
    assert numbers.dump() == b"1\x09\x02\x01\x01\x02\x01\x02\x02\x01\x03"


def test_signing_mends_asn1crypto_in_its_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from quire.asn1backport import mended
        from quire.blobstore import sha256_file
        from quire.signer.keystore import GeneratedKeys
        from quire.signer.signing import sign_packet
        from quire.testing.pdfs import write_text_pdf
        from pathlib import Path

        folder = Path(sys.argv[1])
        _version, key, cert = GeneratedKeys(folder / "keys").new_version(1, rotating=False)
        packet = write_text_pdf(folder / "packet.pdf", ["one"])
        before = mended()
        sign_packet(str(packet), sha256_file(packet)[0], str(folder / "signed.pdf"),
                    str(key), str(cert))
        print(before, mended())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["False", "True"]


def test_an_asn1crypto_with_the_fix_is_left_alone(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        from asn1crypto import core
        from quire.asn1backport import mend

        # A release with upstream's fix: each class clears the mark itself.
        def fixed(encode):
            def _set_contents(self, force=False):
                encode(self, force)
                self._mutated = False
            return _set_contents

        classes = (core.Sequence, core.SequenceOf, core.Set, core.SetOf)
        released = {cls: fixed(cls.__dict__["_set_contents"]) for cls in classes}
        for cls, method in released.items():
            cls._set_contents = method
        mend()
        print(all(cls.__dict__["_set_contents"] is released[cls] for cls in classes))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "True"
