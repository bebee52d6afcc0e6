"""Every file of the shared corpus the validator accepts goes through the
assembler and the signer without an exception, and the signed packet shows
what a second reader (pdfium, drawing form fields as viewers do) shows of
the original: no page of the packet is blank where the original is written,
shows a layer the original hides, or the like (issue 36).

The stages' own functions run here, each file in a worker process of a
pool as wide as the machine: ``inspect_source`` (with repair),
``assemble_packet`` of that one source (its clean rewrite when repaired)
and ``sign_packet`` with a generated key; then pdfium draws each page of the
original and of the signed packet. A source without form fields must read
exactly the same in its signed packet: each page's text and raster. A
source with fields has them flattened into page content by the merge, so
its pages are compared by their pixels, not their text: a page counts as
changed when more than ``CHANGED`` of its pixels move by more than 64 gray
levels, and none may move more than ``MOVED`` (regenerated field text lands
a pixel or two away, or loses a viewer's drop-down arrow; a multi-line value
cut to one line moves more, a hidden layer shown a fifth of the page).
Every file, by default (``CORPUS_SIGN_EVERY`` takes one in so many of each
folder)."""

from __future__ import annotations

import collections
import hashlib
import multiprocessing
import os
import tempfile
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from conftest import CORPUS

from quire.database import Database
from quire.signer import tables
from quire.signer.keystore import GeneratedKeys, KeyStore

EVERY = int(os.environ.get("CORPUS_SIGN_EVERY", "1"))
CHANGED = 0.002
MOVED = 0.01


def _sample() -> list[Path]:
    by_folder: dict[Path, list[Path]] = collections.defaultdict(list)
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        by_folder[path.parent].append(path)
    return sorted(p for files in by_folder.values() for p in files[::EVERY])


def _through_the_stages(path: str, key_path: str, cert_path: str) -> tuple[str, float]:
    """("accepted"|"refused"|"raised"|"unreadable", the largest share of one
    page's pixels that moved) for one corpus file; the traceback as the
    second item when a stage raised."""
    from quire.assembler.merge import PacketSource, assemble_packet
    from quire.signer.signing import sign_packet
    from quire.validator.faithfulness import agreement
    from quire.validator.inspection import PDF_TYPE, inspect_source
    from quire.validator.secondreader import visible_change

    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    with tempfile.TemporaryDirectory() as work:
        rewrite = os.path.join(work, "clean.pdf")
        finding = inspect_source(path, digest, PDF_TYPE, None, rewrite)
        if finding.reason or finding.detected_type != PDF_TYPE:
            return "refused", 0.0
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
            return "raised", traceback.format_exc(limit=3)  # type: ignore[return-value]
        shares = visible_change(path, signed)
        if shares is None:
            return "unreadable", 0.0
        moved = max(shares, default=0.0)
        # Pages only: the signed packet adds its signature's field.
        if not _has_form(path) and not agreement(path, signed, actions=False).agrees:
            return "differs", moved
        return "accepted", moved


def _has_form(path: str) -> bool:
    """Whether the merge flattens form fields of this source into its pages."""
    import pikepdf

    with pikepdf.open(path) as pdf:
        return "/AcroForm" in pdf.Root


def test_every_accepted_corpus_file_assembles_signs_and_shows_the_same_pages(
    corpus: Path, tmp_path: Path
) -> None:
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    database.create_schema()
    key = KeyStore(database, GeneratedKeys(tmp_path / "keys")).ensure_active_key()
    files = _sample()
    # Spawned, not forked: a fork of this process (threads of the session's
    # stacks among its own) can copy a held import lock into the child.
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(os.cpu_count() or 2, mp_context=spawn) as pool:
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
    changed = {
        str(p.relative_to(corpus)): round(share, 4)
        for p, (kind, share) in outcomes.items()
        if kind == "accepted" and share > CHANGED
    }
    print(f"\n{len(files)} corpus files: {dict(counts)}; pages visibly changed in {changed}")
    raised = {str(p.relative_to(corpus)): s for p, (k, s) in outcomes.items() if k == "raised"}
    assert not raised, f"a later stage raised on a file the validator accepted: {raised}"
    moved = {name: share for name, share in changed.items() if share > MOVED}
    differs = [str(p.relative_to(corpus)) for p, (k, _) in outcomes.items() if k == "differs"]
    assert not differs, f"form-less sources whose signed packet reads differently: {differs}"
    assert not moved, f"signed packets that show a page other than the original: {moved}"
    assert not counts["unreadable"], "pdfium reads every accepted original and signed packet"
    assert counts["accepted"] > len(files) // 2, "most of the corpus is accepted and signed"
