"""Blobs sealed at rest: the segment format refuses every edit, data keys are
wrapped by the configured KEK only, rotation rewraps without touching blobs,
and shredding makes a tenant's blobs unreadable with a typed error."""

from __future__ import annotations

import base64
import hashlib
import io
import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from quire.datakeys import DataKeys
from quire.errors import FailedPrecondition, PermanentError, TransientError
from quire.kek import (
    KekConfigError,
    KekRing,
    KekSettings,
    Pkcs11Kek,
    SoftwareKek,
    load_kek_ring,
)
from quire.localblobs import LocalBlobStore
from quire.reasons import ReasonCode
from quire.sealing import SEGMENT_BYTES, Sealer, open_sealed, read_header
from quire.testing.sealedstore import made_up_ring
from quire.testing.softhsm import MODULE, PIN, init_token

MARKER = b"QUIRE-PLAINTEXT-MARKER-7f3a"


def _seal(plain: bytes, key: bytes, tenant: str = "t", pieces: int = 7) -> bytes:
    sealer = Sealer(tenant, 1, key)
    step = max(1, len(plain) // pieces)
    out = [sealer.update(plain[i : i + step]) for i in range(0, len(plain), step)]
    return b"".join([*out, sealer.finish()])


def _open(sealed: bytes, key: bytes) -> bytes:
    handle = io.BytesIO(sealed)
    return b"".join(open_sealed(handle, read_header(handle), key))


@pytest.mark.parametrize(
    "size", [0, 1, SEGMENT_BYTES - 1, SEGMENT_BYTES, SEGMENT_BYTES + 1, 3 * SEGMENT_BYTES + 5]
)
def test_any_size_round_trips_and_holds_no_plaintext(size: int) -> None:
    key = os.urandom(32)
    plain = (MARKER * (size // len(MARKER) + 1))[:size]
    sealed = _seal(plain, key)
    assert _open(sealed, key) == plain
    if size >= len(MARKER):
        assert MARKER not in sealed


def _refused(sealed: bytes, key: bytes) -> None:
    with pytest.raises(PermanentError) as caught:
        _open(sealed, key)
    assert caught.value.reason is ReasonCode.DIGEST_MISMATCH


def test_edits_truncation_extension_and_reordering_do_not_open() -> None:
    key = os.urandom(32)
    plain = os.urandom(3 * SEGMENT_BYTES + 100)
    sealed = _seal(plain, key)
    header = len(Sealer("t", 1, key).header.encode())
    segment = SEGMENT_BYTES + 16
    flipped = bytearray(sealed)
    flipped[header + 10] ^= 1
    _refused(bytes(flipped), key)
    _refused(sealed[: header + 2 * segment], key)  # cut at a segment boundary
    _refused(sealed[:-1], key)
    _refused(sealed + b"\0" * 17, key)
    first, second = (
        sealed[header : header + segment],
        sealed[header + segment : header + 2 * segment],
    )
    _refused(sealed[:header] + second + first + sealed[header + 2 * segment :], key)
    _refused(b"%PDF-1.7 not sealed at all", key)
    _refused(sealed, os.urandom(32))


def test_a_blob_moved_to_another_tenant_does_not_open(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path, DataKeys(tmp_path, made_up_ring()))
    with store.writer("alpha") as writer:
        writer.write(b"alpha's document")
        writer.promote("sources/alpha/doc")
    target = store.local_path("sources/beta/doc")
    target.parent.mkdir(parents=True)
    shutil.copyfile(store.local_path("sources/alpha/doc"), target)
    with pytest.raises(PermanentError) as caught:
        store.digest("sources/beta/doc")
    assert caught.value.reason is ReasonCode.DIGEST_MISMATCH
    with store.writer("alpha") as writer:
        writer.write(b"x")
        with pytest.raises(PermanentError):
            writer.promote("sources/beta/other")  # a writer seals for its own tenant only


def test_the_store_holds_no_plaintext_and_materializes_into_the_given_directory(
    tmp_path: Path,
) -> None:
    store = LocalBlobStore(tmp_path / "blobs", DataKeys(tmp_path / "blobs", made_up_ring()))
    document = MARKER * 5000
    with store.writer("t") as writer:
        writer.write(document)
        writer.promote("sources/t/a")
    worker_output = store.new_temp("packet")
    worker_output.write_bytes(document)
    store.promote_file(worker_output, "assembled/t/b")
    assert not worker_output.exists()
    for path in (tmp_path / "blobs").rglob("*"):
        if path.is_file():
            assert MARKER not in path.read_bytes(), path.name
    private = store.new_temp_dir("attempt")
    copy = store.materialize("assembled/t/b", hashlib.sha256(document).hexdigest(), private)
    assert copy.parent == private and copy.read_bytes() == document
    with pytest.raises(PermanentError) as caught:
        store.materialize("sources/t/a", "0" * 64, private)
    assert caught.value.reason is ReasonCode.DIGEST_MISMATCH
    assert list(private.iterdir()) == [copy], "a copy that fails its digest is removed"


def test_data_keys_are_stored_wrapped_and_one_wins_a_creation_race(tmp_path: Path) -> None:
    ring = made_up_ring()
    first, second = DataKeys(tmp_path, ring), DataKeys(tmp_path, ring)
    version, key = first.for_writing("t")
    assert second.for_writing("t") == (version, key), "both processes use the winner's key"
    stored = (tmp_path / ".keyring" / "t" / "v1.key").read_bytes()
    assert key not in stored and base64.b64encode(key) not in stored
    assert oct((tmp_path / ".keyring" / "t" / "v1.key").stat().st_mode & 0o777) == "0o600"


def test_a_data_key_needs_the_kek_that_wrapped_it(tmp_path: Path) -> None:
    DataKeys(tmp_path, made_up_ring("old")).for_writing("t")
    with pytest.raises(TransientError) as caught:
        DataKeys(tmp_path, made_up_ring("other")).for_reading("t", 1)
    assert caught.value.reason is ReasonCode.DATA_KEY_UNAVAILABLE
    same_id_wrong_key = KekRing(SoftwareKek("old", os.urandom(32)), [])
    with pytest.raises(TransientError):
        DataKeys(tmp_path, same_id_wrong_key).for_reading("t", 1)


def test_rotating_the_kek_rewraps_keys_and_leaves_blobs_untouched(tmp_path: Path) -> None:
    old = SoftwareKek("k1", os.urandom(32))
    new = SoftwareKek("k2", os.urandom(32))
    store = LocalBlobStore(tmp_path, DataKeys(tmp_path, KekRing(old, [])))
    for tenant in ("a", "b"):
        with store.writer(tenant) as writer:
            writer.write(tenant.encode() * 100)
            writer.promote(f"sources/{tenant}/doc")
    blobs_before = {
        p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and ".keyring" not in p.parts
    }
    rotating = DataKeys(tmp_path, KekRing(new, [old]))
    report = rotating.rewrap()
    assert (report.rewrapped, report.already_current, report.current_kek) == (2, 0, "k2")
    assert rotating.rewrap().rewrapped == 0, "a second rewrap has nothing to do"
    after = {p: p.read_bytes() for p in blobs_before}
    assert after == blobs_before, "no blob was rewritten"
    only_new = LocalBlobStore(tmp_path, DataKeys(tmp_path, KekRing(new, [])))
    for tenant in ("a", "b"):
        digest = hashlib.sha256(tenant.encode() * 100).hexdigest()
        assert only_new.digest(f"sources/{tenant}/doc")[0] == digest
    with pytest.raises(TransientError):
        DataKeys(tmp_path, KekRing(old, [])).for_reading("a", 1)


def test_shredding_makes_the_tenant_unreadable_at_once_and_refuses_new_writes(
    tmp_path: Path,
) -> None:
    ring = made_up_ring()
    service = LocalBlobStore(tmp_path, DataKeys(tmp_path, ring))
    for tenant in ("gone", "kept"):
        with service.writer(tenant) as writer:
            writer.write(b"document of " + tenant.encode())
            writer.promote(f"signed/{tenant}/job.pdf")
    assert service.digest("signed/gone/job.pdf")  # its key is now cached in this process
    operator = DataKeys(tmp_path, ring)
    assert operator.shred("gone") == 1
    with pytest.raises(FailedPrecondition) as caught:
        service.digest("signed/gone/job.pdf")
    assert caught.value.reason is ReasonCode.DATA_SHREDDED
    with pytest.raises(FailedPrecondition):
        service.writer("gone")
    assert service.digest("signed/kept/job.pdf")[1] == len(b"document of kept")
    assert operator.rewrap().rewrapped == 0, "a rewrap never brings a shredded key back"
    status = {entry["tenant"]: entry for entry in operator.status()}
    assert status["gone"]["shredded"] is True and status["gone"]["keys"] == []


def test_a_ring_inside_the_data_directory_is_refused_outside_development(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ring = data_dir / "keys" / "ring"
    ring.parent.mkdir(parents=True)
    ring.write_text(f"k1 {base64.b64encode(os.urandom(32)).decode()}\n")
    with pytest.raises(KekConfigError):
        load_kek_ring(KekSettings(ring_file=ring), data_dir)
    assert load_kek_ring(KekSettings(ring_file=ring, development=True), data_dir).current.kek_id
    with pytest.raises(KekConfigError):
        load_kek_ring(KekSettings(), data_dir)
    outside = tmp_path / "secret-ring"
    outside.write_text(
        "# rotated 2026-11\n"
        f"k2 {base64.b64encode(os.urandom(32)).decode()}\n"
        f"k1 {base64.b64encode(os.urandom(32)).decode()}\n"
    )
    loaded = load_kek_ring(KekSettings(ring_file=outside), data_dir)
    assert loaded.current.kek_id == "k2" and loaded.ids == ["k1", "k2"]
    outside.write_text("k1 not-base64!\n")
    with pytest.raises(KekConfigError):
        load_kek_ring(KekSettings(ring_file=outside), data_dir)


def _round_trip_in_token(tmp: str) -> dict[str, object]:
    """In a fresh process (SoftHSM2 reads its configuration once per process):
    make an AES KEK in the token, seal a blob under a data key it wrapped, and
    open it again from a second ring loaded from the same settings."""
    import pkcs11
    from pkcs11 import KeyType

    tmp_path = Path(tmp)
    token = pkcs11.lib(MODULE).get_token(token_label="kek")
    with token.open(user_pin=PIN, rw=True) as session:
        session.generate_key(KeyType.AES, 256, label="quire-kek", store=True)
    pin = tmp_path / "pin"
    pin.write_text(f"{PIN}\n")
    settings = KekSettings(
        pkcs11_module=MODULE,
        pkcs11_token="kek",
        pkcs11_labels=("quire-kek",),
        pkcs11_pin_file=pin,
    )
    ring = load_kek_ring(settings, tmp_path / "data")
    store = LocalBlobStore(tmp_path / "blobs", DataKeys(tmp_path / "blobs", ring))
    with store.writer("t") as writer:
        writer.write(MARKER)
        writer.promote("sources/t/doc")
    fresh = LocalBlobStore(
        tmp_path / "blobs", DataKeys(tmp_path / "blobs", load_kek_ring(settings, tmp_path))
    )
    try:
        DataKeys(tmp_path / "blobs", made_up_ring("pkcs11:kek/quire-kek")).for_reading("t", 1)
        impostor = "opened"
    except TransientError as error:
        impostor = error.reason.value
    return {
        "in_token": isinstance(ring.current, Pkcs11Kek),
        "kek_id": ring.current.kek_id,
        "digest": fresh.digest("sources/t/doc"),
        "impostor": impostor,
    }


def test_a_kek_inside_a_pkcs11_token_wraps_and_unwraps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    init_token(tmp_path, monkeypatch, "kek")
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        facts = pool.submit(_round_trip_in_token, str(tmp_path)).result(timeout=120)
    assert facts["in_token"] and facts["kek_id"] == "pkcs11:kek/quire-kek"
    assert facts["digest"] == (hashlib.sha256(MARKER).hexdigest(), len(MARKER))
    assert facts["impostor"] == "DATA_KEY_UNAVAILABLE", "a software KEK of that id does not fit"
