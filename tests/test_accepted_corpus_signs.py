"""Every file of the shared corpus the validator accepts goes through the
assembler and the signer without an exception, and a repaired one's signed
packet shows what a second reader (pdfium) shows of the original, page by
page (issue 36). Intact files whose packet pdfium draws differently (the
merge rewrites form fields, drops the sources' own signatures) are counted
and printed, not yet held to zero.

The stages' own functions run here, each file in a worker process of a
pool as wide as the machine: ``inspect_source`` (with repair),
``assemble_packet`` of that one source (its clean rewrite when repaired)
and ``sign_packet`` with a generated key; then pdfium reads the original
and the signed packet. ``make test`` takes one file in ``EVERY`` of each
folder (``CORPUS_SIGN_EVERY``, 1 for all of them)."""

from __future__ import annotations

import collections
import hashlib
import os
import tempfile
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from conftest import CORPUS

from quire.database import Database
from quire.signer import tables
from quire.signer.keystore import GeneratedKeys, KeyStore

EVERY = int(os.environ.get("CORPUS_SIGN_EVERY", "2"))


def _sample() -> list[Path]:
    by_folder: dict[Path, list[Path]] = collections.defaultdict(list)
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        by_folder[path.parent].append(path)
    return sorted(p for files in by_folder.values() for p in files[::EVERY])


def _through_the_stages(path: str, key_path: str, cert_path: str) -> tuple[str, str]:
    """("accepted"|"refused"|"raised", detail) for one corpus file."""
    from quire.assembler.merge import PacketSource, assemble_packet
    from quire.signer.signing import sign_packet
    from quire.validator.faithfulness import agreement
    from quire.validator.inspection import PDF_TYPE, inspect_source

    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    with tempfile.TemporaryDirectory() as work:
        rewrite = os.path.join(work, "clean.pdf")
        finding = inspect_source(path, digest, PDF_TYPE, None, rewrite)
        if finding.reason or finding.detected_type != PDF_TYPE:
            return "refused", str(finding.reason)
        try:
            source = PacketSource(
                position=0,
                document_id="d",
                sha256=digest,
                content_type=PDF_TYPE,
                path=rewrite if finding.repaired else path,
                normalized_sha256=finding.normalized_sha256,
            )
            packet = os.path.join(work, "packet.pdf")
            merged = assemble_packet(
                [source], packet, profile="", manifest_digest="0" * 64, workdir=work
            )
            signed = os.path.join(work, "signed.pdf")
            sign_packet(packet, merged.sha256, signed, key_path, cert_path)
        except Exception:  # noqa: BLE001 — the test reports which stage raised what
            return "raised", traceback.format_exc(limit=3)
        agreed = agreement(path, signed)
        if not agreed.agrees:
            kind = "repair differs" if finding.repaired else "merge differs"
            return kind, f"{agreed.detail} pages {agreed.pages[:10]}"
        return "accepted", ""


def test_every_accepted_corpus_file_assembles_signs_and_shows_the_same_pages(
    corpus: Path, tmp_path: Path
) -> None:
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    database.create_schema()
    key = KeyStore(database, GeneratedKeys(tmp_path / "keys")).ensure_active_key()
    files = _sample()
    with ProcessPoolExecutor(os.cpu_count() or 2, max_tasks_per_child=50) as pool:
        outcomes = dict(
            zip(
                files,
                pool.map(
                    _through_the_stages,
                    [str(p) for p in files],
                    [key.key_path] * len(files),
                    [key.cert_path] * len(files),
                    chunksize=8,
                ),
                strict=True,
            )
        )
    counts = collections.Counter(kind for kind, _ in outcomes.values())
    print(f"\n{len(files)} corpus files: {dict(counts)}")
    raised = {str(p.relative_to(corpus)): d for p, (k, d) in outcomes.items() if k == "raised"}
    assert not raised, f"a later stage raised on a file the validator accepted: {raised}"
    differs = {
        str(p.relative_to(corpus)): d for p, (k, d) in outcomes.items() if k == "repair differs"
    }
    assert not differs, f"signed repairs that show other pages than the original: {differs}"
    assert counts["accepted"] > len(files) // 2, "most of the corpus is accepted and signed"
