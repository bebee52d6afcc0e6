"""Copying a source's pages into the packet without losing what the reader needs.

``pdf.pages.extend`` copies pages alone: widgets arrive without the source's
AcroForm (the values are then unreachable, and invisible where there is no
appearance stream), named destinations are left behind (links go nowhere) and
bookmarks are not copied at all. Here each source is appended page by page
with qpdf's own form-field fix-up, its named destinations are carried over
under a per-source prefix with every link rewritten to match, and its
bookmarks are rebuilt pointing at the copied pages. ``finish_forms`` then
generates missing appearance streams from the field values and, by default,
flattens the widgets into page content.

Everything is walked in document order and names are derived from manifest
positions only, so the packet's bytes stay a function of its sources.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pikepdf
from pikepdf import Array, Dictionary, Name, String

__all__ = [
    "SourceCopy",
    "carry_outline",
    "finish_forms",
    "field_prefix",
    "dest_prefix",
    "kept_appearances",
]

MAX_DEPTH = 64  # outline and field nesting; the validator refuses loops beforehand
TEXT_LIKE = (Name.Tx, Name.Ch)
DEFAULT_FONT = "/QuireHelv"
DEFAULT_APPEARANCE = f"{DEFAULT_FONT} 0 Tf 0 g"


def field_prefix(position: int) -> str:
    return f"p{position}_"


def dest_prefix(position: int) -> str:
    return f"p{position}-"


def _inherited(node: Dictionary, key: Name) -> Any:
    for _ in range(MAX_DEPTH):
        if key in node:
            return node[key]
        parent = node.get(Name.Parent)
        if not isinstance(parent, Dictionary):
            return None
        node = parent
    return None


def _top_field(widget: Dictionary) -> Dictionary:
    node = widget
    for _ in range(MAX_DEPTH):
        parent = node.get(Name.Parent)
        if not isinstance(parent, Dictionary):
            break
        node = parent
    return node


def _widgets(page: pikepdf.Page) -> list[Dictionary]:
    annots = page.obj.get(Name.Annots)
    if not isinstance(annots, Array):
        return []
    return [a for a in annots if isinstance(a, Dictionary) and a.get(Name.Subtype) == Name.Widget]


def _prefix_fields(src: pikepdf.Pdf, position: int) -> bool:
    """Rename the source's top-level fields (in memory) so no two sources collide.

    Widgets on pages that the source's AcroForm does not reach are adopted as
    fields, so their values are neither orphaned nor lost. Returns whether the
    source asked viewers to regenerate appearances."""
    widgets = [w for page in src.pages for w in _widgets(page)]
    acroform = src.Root.get(Name.AcroForm)
    if not widgets and not isinstance(acroform, Dictionary):
        return False
    if not isinstance(acroform, Dictionary):
        acroform = src.make_indirect(Dictionary(Fields=Array()))
        src.Root.AcroForm = acroform
    fields = acroform.get(Name.Fields)
    if not isinstance(fields, Array):
        fields = Array()
        acroform.Fields = fields
    listed = {f.objgen for f in fields if isinstance(f, Dictionary) and f.is_indirect}
    for widget in widgets:
        top = _top_field(widget)
        if top.is_indirect and top.objgen not in listed:
            listed.add(top.objgen)
            fields.append(top)
    prefix = field_prefix(position)
    for index, entry in enumerate(fields):
        if not isinstance(entry, Dictionary):
            continue
        top = entry
        name = top.get(Name.T)
        top.T = String(prefix + (str(name) if name is not None else f"field{index}"))
    return bool(acroform.get(Name.NeedAppearances, False))


def _named_dests(src: pikepdf.Pdf) -> list[tuple[str, str, Any]]:
    """Every named destination: (kind, name, value), name tree first, each in order."""
    found: list[tuple[str, str, Any]] = []
    names = src.Root.get(Name.Names)
    if isinstance(names, Dictionary) and isinstance(names.get(Name.Dests), Dictionary):
        for key, value in pikepdf.NameTree(names.Dests).items():
            found.append(("string", str(key), value))
    legacy = src.Root.get(Name.Dests)
    if isinstance(legacy, Dictionary):
        for key in sorted(legacy.keys()):
            found.append(("name", str(key), legacy[key]))
    return found


@dataclass
class SourceCopy:
    """One source's pages appended to the packet, and how its names moved."""

    packet: pikepdf.Pdf
    source: pikepdf.Pdf
    position: int
    start: int
    pages: dict[tuple[int, int], Dictionary] = field(default_factory=dict)
    string_dests: dict[str, str] = field(default_factory=dict)
    name_dests: dict[str, str] = field(default_factory=dict)
    need_appearances: bool = False

    @classmethod
    def append(cls, packet: pikepdf.Pdf, src: pikepdf.Pdf, position: int) -> SourceCopy:
        copy = cls(packet, src, position, len(packet.pages))
        copy.need_appearances = _prefix_fields(src, position)
        src_form = src.acroform
        packet_form = packet.acroform
        for page in src.pages:
            # append (not extend) and qpdf's fix-up: widgets keep their fields
            packet.pages.append(page)
            copied = packet.pages[len(packet.pages) - 1]
            if src_form.exists:
                packet_form.fix_copied_annotations(copied, page, src_form)
            copy.pages[page.obj.objgen] = copied.obj
        copy._carry_named_dests()
        for offset in range(len(copy.pages)):
            copy._rewrite_links(packet.pages[copy.start + offset].obj)
        return copy

    # destinations -----------------------------------------------------------

    def map_explicit(self, dest: Array) -> Array | None:
        """An explicit destination in the source, pointing at the copied page."""
        if len(dest) == 0:
            return None
        target = dest[0]
        if isinstance(target, Dictionary):
            page = self.pages.get(target.objgen)
        elif isinstance(target, int) and 0 <= int(target) < len(self.pages):
            page = self.packet.pages[self.start + int(target)].obj
        else:
            page = None
        if page is None:
            return None
        return Array(
            [page, *[self.packet.copy_foreign(v) if _is_foreign(v) else v for v in list(dest)[1:]]]
        )

    def map_dest(self, dest: Any) -> Any:
        """A source destination (name, string or array) as the packet knows it."""
        if isinstance(dest, String):
            renamed = self.string_dests.get(str(dest))
            return String(renamed) if renamed is not None else None
        if isinstance(dest, Name):
            renamed = self.name_dests.get(str(dest))
            return Name(renamed) if renamed is not None else None
        if isinstance(dest, Array):
            return self.map_explicit(dest)
        return None

    def _carry_named_dests(self) -> None:
        entries = _named_dests(self.source)
        prefix = dest_prefix(self.position)
        for kind, name, _ in entries:
            if kind == "string":
                self.string_dests[name] = prefix + name
            else:
                self.name_dests[name] = "/" + prefix + name[1:]
        tree = None
        for kind, name, value in entries:
            target = value.get(Name.D) if isinstance(value, Dictionary) else value
            mapped = self.map_explicit(target) if isinstance(target, Array) else None
            if mapped is None:
                continue  # points outside this source: there is nothing to go to
            if kind == "string":
                if tree is None:
                    tree = self._string_tree()
                tree[self.string_dests[name]] = mapped
            else:
                legacy = self.packet.Root.get(Name.Dests)
                if not isinstance(legacy, Dictionary):
                    legacy = self.packet.make_indirect(Dictionary())
                    self.packet.Root.Dests = legacy
                legacy[Name(self.name_dests[name])] = mapped

    def _string_tree(self) -> pikepdf.NameTree:
        names = self.packet.Root.get(Name.Names)
        if not isinstance(names, Dictionary):
            names = self.packet.make_indirect(Dictionary())
            self.packet.Root.Names = names
        if Name.Dests not in names:
            names.Dests = pikepdf.NameTree.new(self.packet).obj
        return pikepdf.NameTree(names.Dests)

    def _renamed(self, dest: Any) -> Any:
        if isinstance(dest, String) and str(dest) in self.string_dests:
            return String(self.string_dests[str(dest)])
        if isinstance(dest, Name) and str(dest) in self.name_dests:
            return Name(self.name_dests[str(dest)])
        return None

    def _rewrite_links(self, page: Dictionary) -> None:
        """Links on a copied page name the packet's (renamed) destinations."""
        annots = page.get(Name.Annots)
        if not isinstance(annots, Array):
            return
        seen: set[tuple[int, int]] = set()
        for annot in annots:
            if not isinstance(annot, Dictionary):
                continue
            renamed = self._renamed(annot.get(Name.Dest))
            if renamed is not None:
                annot.Dest = renamed
            self._rewrite_action(annot.get(Name.A), seen, 0)
            triggers = annot.get(Name.AA)
            if isinstance(triggers, Dictionary):
                for key in triggers.keys():
                    self._rewrite_action(triggers[key], seen, 0)

    def _rewrite_action(self, action: Any, seen: set[tuple[int, int]], depth: int) -> None:
        if isinstance(action, Array):
            for item in action:
                self._rewrite_action(item, seen, depth + 1)
            return
        if not isinstance(action, Dictionary) or depth > MAX_DEPTH:
            return
        if action.is_indirect:
            if action.objgen in seen:
                return
            seen.add(action.objgen)
        if action.get(Name.S) == Name.GoTo:
            renamed = self._renamed(action.get(Name.D))
            if renamed is not None:
                action.D = renamed
        self._rewrite_action(action.get(Name.Next), seen, depth + 1)


def _is_foreign(value: Any) -> bool:
    return isinstance(value, pikepdf.Object) and value.is_indirect


def carry_outline(copy: SourceCopy) -> list[pikepdf.OutlineItem]:
    """The source's bookmarks, pointing at the copied pages (titles kept)."""
    with copy.source.open_outline() as outline:
        return [_carry_item(copy, item, 0) for item in outline.root]


def _carry_item(copy: SourceCopy, item: pikepdf.OutlineItem, depth: int) -> pikepdf.OutlineItem:
    dest: Any = item.destination
    action = item.action
    if dest is None and isinstance(action, Dictionary) and action.get(Name.S) == Name.GoTo:
        dest, action = action.get(Name.D), None
    mapped = copy.map_dest(dest) if dest is not None else None
    carried_action: Dictionary | None = None
    if mapped is None and isinstance(action, Dictionary) and action.get(Name.S) != Name.GoTo:
        # copy_foreign takes indirect objects only; an action may be written inline.
        source_action = action if action.is_indirect else copy.source.make_indirect(action)
        foreign = copy.packet.copy_foreign(source_action)
        carried_action = foreign if isinstance(foreign, Dictionary) else None
    carried = pikepdf.OutlineItem(str(item.title), mapped, action=carried_action)
    carried.is_closed = item.is_closed
    if depth < MAX_DEPTH:
        carried.children.extend(_carry_item(copy, child, depth + 1) for child in item.children)
    return carried


# form fields ----------------------------------------------------------------


def finish_forms(
    packet: pikepdf.Pdf,
    mode: str,
    *,
    need_appearances: bool = False,
    kept: Collection[tuple[int, int]] = (),
) -> None:
    """Give every text and choice field an appearance, then flatten if asked.

    ``mode`` is ``flatten`` (widgets become page content, the AcroForm goes)
    or ``merge`` (fields stay interactive under their per-source names). Only
    widgets are flattened: links and other annotations stay as they are.

    qpdf regenerates every field's appearance once any is asked for, and
    lays each value out on one line; the widgets in ``kept`` (from sources
    that did not ask viewers to regenerate: they show their own appearance
    everywhere) keep the appearance they came with, so a packet never shows
    a multi-line value cut to one line or realigned."""
    acroform = packet.Root.get(Name.AcroForm)
    if not isinstance(acroform, Dictionary):
        return
    widgets = [w for page in packet.pages for w in _widgets(page)]
    missing = any(_inherited(w, Name.FT) in TEXT_LIKE and Name.AP not in w for w in widgets)
    if need_appearances or missing or bool(acroform.get(Name.NeedAppearances, False)):
        # Copies, not references: qpdf may rewrite an appearance stream in place.
        own = {
            w.objgen: _copied_appearance(packet, w.AP)
            for w in widgets
            if w.objgen in kept and isinstance(w.get(Name.AP), Dictionary)
        }
        _default_appearance(packet, acroform)
        acroform.NeedAppearances = True
        packet.generate_appearance_streams()
        for widget in widgets:
            if widget.objgen in own:
                widget.AP = own[widget.objgen]
    if mode == "flatten" and widgets:
        _flatten_widgets(packet)


def _copied_stream(packet: pikepdf.Pdf, stream: pikepdf.Stream) -> pikepdf.Object:
    copy = pikepdf.Stream(packet, stream.read_raw_bytes())
    for key, value in stream.stream_dict.items():
        if key != "/Length":
            copy[key] = value
    return packet.make_indirect(copy)


def _copied_appearance(packet: pikepdf.Pdf, appearance: Any) -> Dictionary:
    """A widget's appearance dictionary with every stream in it copied
    (``/N``, ``/R``, ``/D``, each a stream or a dictionary of states)."""
    copy = Dictionary()
    for key, value in appearance.items():
        if isinstance(value, pikepdf.Stream):
            copy[key] = _copied_stream(packet, value)
        elif isinstance(value, Dictionary):
            copy[key] = Dictionary(
                {
                    state: _copied_stream(packet, face)
                    if isinstance(face, pikepdf.Stream)
                    else face
                    for state, face in value.items()
                }
            )
        else:
            copy[key] = value
    return copy


def kept_appearances(packet: pikepdf.Pdf, copy: SourceCopy) -> set[tuple[int, int]]:
    """The widgets of ``copy``'s pages whose appearance every viewer shows as
    it is (their source does not set ``/NeedAppearances``)."""
    if copy.need_appearances:
        return set()
    pages = packet.pages[copy.start : copy.start + len(copy.source.pages)]
    return {w.objgen for page in pages for w in _widgets(page) if Name.AP in w}


def _default_appearance(packet: pikepdf.Pdf, acroform: Dictionary) -> None:
    """Fields that name no font are drawn in Helvetica, black, auto-sized."""
    if Name.DA not in acroform:
        acroform.DA = String(DEFAULT_APPEARANCE)
    resources = acroform.get(Name.DR)
    if not isinstance(resources, Dictionary):
        resources = Dictionary()
        acroform.DR = resources
    fonts = resources.get(Name.Font)
    if not isinstance(fonts, Dictionary):
        fonts = Dictionary()
        resources.Font = fonts
    if Name(DEFAULT_FONT) not in fonts:
        fonts[Name(DEFAULT_FONT)] = packet.make_indirect(
            Dictionary(
                Type=Name.Font,
                Subtype=Name.Type1,
                BaseFont=Name.Helvetica,
                Encoding=Name.WinAnsiEncoding,
            )
        )


def _flatten_widgets(packet: pikepdf.Pdf) -> None:
    kept: list[list[Any]] = []
    for page in packet.pages:
        annots = page.obj.get(Name.Annots)
        if not isinstance(annots, Array):
            kept.append([])
            continue
        indirect = [
            a if a.is_indirect else packet.make_indirect(a)
            for a in annots
            if isinstance(a, Dictionary)
        ]
        kept.append(indirect)
        page.obj.Annots = Array([a for a in indirect if a.get(Name.Subtype) == Name.Widget])
    packet.flatten_annotations("all")
    # qpdf drops the AcroForm once it has flattened the fields. A widget it
    # left behind had nothing to draw (hidden, or no appearance: typically a
    # source's own, now meaningless, invisible signature field); without the
    # AcroForm it would be an orphan, so it goes too.
    form_left = Name.AcroForm in packet.Root
    for page, original in zip(packet.pages, kept, strict=True):
        remaining = page.obj.get(Name.Annots)
        left = (
            {a.objgen for a in remaining} if form_left and isinstance(remaining, Array) else set()
        )
        carried = [a for a in original if a.get(Name.Subtype) != Name.Widget or a.objgen in left]
        if carried:
            page.obj.Annots = Array(carried)
        elif Name.Annots in page.obj:
            del page.obj.Annots
