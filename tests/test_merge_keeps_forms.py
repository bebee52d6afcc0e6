"""Merging keeps what the reader needs (issue 13): filled form values stay
visible (flattened by default, or as renamed interactive fields under a
``*-fillable`` profile), links and named destinations lead to the copied
pages, each source's bookmarks sit under its own bookmark, and no page copy
warns that it lost something."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Array, Dictionary, Name, String

from quire.assembler.merge import PacketSource, assemble_packet
from quire.blobstore import sha256_file
from quire.testing.pdfs import text_pdf, write_form_pdf, write_text_pdf

pytestmark = pytest.mark.filterwarnings("error::pikepdf._exceptions.PageCopyWarning")

PDF = "application/pdf"
FIELDS = {"tenant": "Ada Lovelace", "rent": "1200.00 EUR"}


def _link(pdf: pikepdf.Pdf, **entries: object) -> Dictionary:
    return pdf.make_indirect(
        Dictionary(Type=Name.Annot, Subtype=Name.Link, Rect=[72, 72, 200, 90], **entries)
    )


def write_linked_pdf(path: Path, label: str) -> Path:
    """Three pages; page 1 links to pages 2 and 3 by string name, by catalog
    name, by a GoTo action and by an explicit page; bookmarks for both."""
    with text_pdf([f"{label} contents", f"{label} chapter two", f"{label} appendix"]) as pdf:
        one, two, three = (page.obj for page in pdf.pages)
        one.Annots = pdf.make_indirect(
            Array(
                [
                    _link(pdf, Dest=String("chapter2")),
                    _link(pdf, Dest=Name("/Appendix")),
                    _link(pdf, A=Dictionary(S=Name.GoTo, D=String("chapter2"))),
                    _link(pdf, Dest=Array([three, Name.Fit])),
                ]
            )
        )
        names = pikepdf.NameTree.new(pdf)
        names["chapter2"] = Array([two, Name.XYZ, 0, 792, 0])
        names["contents"] = Array([one, Name.Fit])
        pdf.Root.Names = Dictionary(Dests=names.obj)
        pdf.Root.Dests = pdf.make_indirect(
            Dictionary(Appendix=Dictionary(D=Array([three, Name.Fit])))
        )
        with pdf.open_outline() as outline:
            chapter = pikepdf.OutlineItem("Chapter two")
            chapter.destination = String("chapter2")
            chapter.children.append(pikepdf.OutlineItem("Appendix", 2))
            outline.root.append(chapter)
        pdf.save(path, deterministic_id=True)
    return path


def _source(position: int, name: str, path: Path) -> PacketSource:
    return PacketSource(position, name, sha256_file(path)[0], PDF, str(path))


def _assemble(tmp_path: Path, sources: list[PacketSource], profile: str, name: str) -> Path:
    out = tmp_path / name
    assemble_packet(
        sources, str(out), profile=profile, manifest_digest="m" * 64, workdir=str(tmp_path)
    )
    return out


def _text(path: Path) -> list[str]:
    printed = subprocess.run(
        ["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout
    return printed.split("\f")


def _three_sources(tmp_path: Path) -> list[PacketSource]:
    cover = write_text_pdf(tmp_path / "cover.pdf", ["cover page"])
    form = write_form_pdf(tmp_path / "form.pdf", ["lease form"], FIELDS)
    linked = write_linked_pdf(tmp_path / "linked.pdf", "terms")
    return [_source(2, "terms", linked), _source(0, "cover", cover), _source(1, "lease", form)]


def _page_index(pdf: pikepdf.Pdf, dest: object) -> int:
    """Resolve a destination (string, name or explicit) to a page index."""
    if isinstance(dest, String):
        dest = pikepdf.NameTree(pdf.Root.Names.Dests)[str(dest)]
    elif isinstance(dest, Name):
        dest = pdf.Root.Dests[dest]
    if isinstance(dest, Dictionary):
        dest = dest.D
    assert isinstance(dest, Array)
    return pdf.pages.index(pikepdf.Page(dest[0]))


@pytest.mark.parametrize("profile", ["simple", "strict"])
def test_the_default_profiles_flatten_filled_fields_into_the_page(
    tmp_path: Path, profile: str
) -> None:
    sources = _three_sources(tmp_path)
    out = _assemble(tmp_path, sources, profile, "packet.pdf")
    pages = _text(out)
    assert "cover page" in pages[0]
    assert "lease form" in pages[1]
    for value in FIELDS.values():
        assert value in pages[1]
    with pikepdf.open(out) as pdf:
        assert Name.AcroForm not in pdf.Root
        widgets = [
            a for page in pdf.pages for a in page.get(Name.Annots, []) if a.Subtype == Name.Widget
        ]
        assert widgets == []
        assert len(pdf.pages[2].Annots) == 4, "links are not flattened away"
    again = _assemble(tmp_path, sources, profile, "again.pdf")
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(out.read_bytes()).digest()


def test_a_fillable_profile_keeps_fields_under_per_source_names(tmp_path: Path) -> None:
    first = write_form_pdf(tmp_path / "a.pdf", ["form a"], {"tenant": "Ada Lovelace"})
    middle = write_text_pdf(tmp_path / "m.pdf", ["middle"])
    second = write_form_pdf(tmp_path / "b.pdf", ["form b"], {"tenant": "Grace Hopper"})
    sources = [_source(0, "a", first), _source(1, "m", middle), _source(2, "b", second)]
    out = _assemble(tmp_path, sources, "simple-fillable", "packet.pdf")
    with pikepdf.open(out) as pdf:
        values = {f.fully_qualified_name: str(f.value) for f in pdf.acroform.fields}
        assert values == {"p0_tenant": "Ada Lovelace", "p2_tenant": "Grace Hopper"}
        for field in pdf.acroform.fields:
            assert Name.AP in field.obj, "values are drawn even where viewers do not regenerate"
        on_pages = {
            str(a.T): pdf.pages.index(pikepdf.Page(a.P))
            for page in pdf.pages
            for a in page.get(Name.Annots, [])
        }
        assert on_pages == {"p0_tenant": 0, "p2_tenant": 2}
    again = _assemble(tmp_path, sources, "simple-fillable", "again.pdf")
    assert again.read_bytes() == out.read_bytes()


@pytest.mark.parametrize("profile", ["simple", "simple-fillable"])
def test_links_and_named_destinations_lead_to_the_copied_pages(
    tmp_path: Path, profile: str
) -> None:
    cover = write_text_pdf(tmp_path / "cover.pdf", ["cover page"])
    one = write_linked_pdf(tmp_path / "one.pdf", "one")
    two = write_linked_pdf(tmp_path / "two.pdf", "two")
    sources = [_source(0, "cover", cover), _source(1, "one", one), _source(2, "two", two)]
    out = _assemble(tmp_path, sources, profile, "packet.pdf")
    with pikepdf.open(out) as pdf:
        assert len(pdf.pages) == 7
        names = pikepdf.NameTree(pdf.Root.Names.Dests)
        assert sorted(names.keys()) == [
            "p1-chapter2",
            "p1-contents",
            "p2-chapter2",
            "p2-contents",
        ]
        assert sorted(str(k) for k in pdf.Root.Dests.keys()) == ["/p1-Appendix", "/p2-Appendix"]
        for position, first in ((1, 1), (2, 4)):
            links = pdf.pages[first].Annots
            assert links[0].Dest == String(f"p{position}-chapter2")
            assert links[1].Dest == Name(f"/p{position}-Appendix")
            assert links[2].A.D == String(f"p{position}-chapter2")
            targets = [_page_index(pdf, links[i].Dest) for i in (0, 1, 3)]
            targets.append(_page_index(pdf, links[2].A.D))
            assert targets == [first + 1, first + 2, first + 2, first + 1]
            assert _page_index(pdf, String(f"p{position}-contents")) == first


def test_each_sources_bookmarks_survive_under_its_own_bookmark(tmp_path: Path) -> None:
    sources = _three_sources(tmp_path)
    out = _assemble(tmp_path, sources, "simple", "packet.pdf")
    with pikepdf.open(out) as pdf, pdf.open_outline() as outline:
        tops = [
            (item.title, pdf.pages.index(pikepdf.Page(item.destination[0])))
            for item in outline.root
        ]
        assert tops == [("cover", 0), ("lease", 1), ("terms", 2)]
        terms = outline.root[2]
        assert [c.title for c in terms.children] == ["Chapter two"]
        chapter = terms.children[0]
        assert chapter.destination == String("p2-chapter2")
        assert _page_index(pdf, chapter.destination) == 3
        assert [c.title for c in chapter.children] == ["Appendix"]
        assert _page_index(pdf, chapter.children[0].destination) == 4


def test_a_fillable_packet_signs_and_its_fields_keep_their_values(tmp_path: Path) -> None:
    from quire.database import Database
    from quire.signer import tables
    from quire.signer.keystore import GeneratedKeys, KeyStore
    from quire.signer.signing import sign_packet

    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    database.create_schema()
    key = KeyStore(database, GeneratedKeys(tmp_path / "keys")).ensure_active_key()
    sources = _three_sources(tmp_path)
    packet = _assemble(tmp_path, sources, "strict-fillable", "packet.pdf")
    signed = tmp_path / "signed.pdf"
    sign_packet(str(packet), sha256_file(packet)[0], str(signed), key.key_path, key.cert_path)
    with pikepdf.open(signed) as pdf:
        values = {
            f.fully_qualified_name: str(f.value)
            for f in pdf.acroform.fields
            if f.field_type == Name.Tx
        }
        assert values == {f"p1_{name}": value for name, value in FIELDS.items()}
    checked = subprocess.run(["pdfsig", str(signed)], capture_output=True, text=True, timeout=60)
    assert "Signature is Valid" in checked.stdout, checked.stdout
    assert "Total document signed" in checked.stdout, checked.stdout


@pytest.mark.stack
async def test_the_signed_packet_shows_the_filled_fields_and_validates(
    stack,
    client,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    from quire.client import PacketItem
    from quire.jobs import state_name

    documents = {
        "cover": write_text_pdf(tmp_path / "cover.pdf", ["cover page"]),
        "lease": write_form_pdf(tmp_path / "form.pdf", ["lease form"], FIELDS),
        "terms": write_linked_pdf(tmp_path / "linked.pdf", "terms"),
    }
    digests = {name: (await client.upload(path)).sha256 for name, path in documents.items()}
    job = await client.submit([PacketItem(name, digests[name]) for name in documents])
    job = await client.wait(job.name, timeout=90)
    assert state_name(job.state) == "COMPLETED", job.reason_code
    output = tmp_path / "signed.pdf"
    await client.download(job.name, output)

    pages = _text(output)
    for value in FIELDS.values():
        assert value in pages[1]
    with pikepdf.open(output) as pdf:
        link = pdf.pages[2].Annots[0]
        assert _page_index(pdf, link.Dest) == 3
    checked = await asyncio.to_thread(
        subprocess.run, ["pdfsig", str(output)], capture_output=True, text=True, timeout=60
    )
    assert "Signature is Valid" in checked.stdout, checked.stdout
    assert "Total document signed" in checked.stdout, checked.stdout
