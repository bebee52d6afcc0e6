"""Optional content (layers) carried into the packet as each source shows it.

A source's catalog says which of its optional-content groups a viewer shows
by default (``/OCProperties /D``: ``/BaseState``, ``/ON``, ``/OFF``). Pages
copied without it would show every group, hidden ones too: a packet that
displays what its source hid is not the document the tenant sent. Each
source's groups and default configuration are copied into one packet
configuration: every group a source hides by default stays hidden (its
``/OFF``, or all its groups but its ``/ON`` under ``/BaseState /OFF``), and
its ``/Order`` and locked groups follow. Other configurations (``/Configs``)
and auto-state rules (``/AS``) are dropped: viewers apply the default one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pikepdf
from pikepdf import Array, Dictionary, Name

__all__ = ["carry_layers"]


def _array(value: object) -> list[Any]:
    return list(value) if isinstance(value, Array) else []


def _groups(value: object) -> list[Any]:
    """The dictionaries of an array (a group list may hold anything)."""
    return [item for item in _array(value) if isinstance(item, Dictionary)]


def carry_layers(packet: pikepdf.Pdf, sources: Iterable[pikepdf.Pdf]) -> None:
    """Give ``packet`` one default optional-content configuration that hides
    what each of ``sources`` hides (their pages already appended)."""
    groups, hidden, shown, order, locked = Array(), Array(), Array(), Array(), Array()
    for source in sources:
        properties = source.Root.get(Name.OCProperties)
        if not isinstance(properties, Dictionary):
            continue
        copied = packet.copy_foreign(source.make_indirect(properties))
        own = _groups(copied.get(Name.OCGs))
        default = copied.get(Name.D)
        default = default if isinstance(default, Dictionary) else Dictionary()
        on, off = _groups(default.get(Name.ON)), _groups(default.get(Name.OFF))
        if default.get(Name.BaseState) == Name.OFF:
            kept = {group.objgen for group in on if group.is_indirect}
            off += [group for group in own if group.is_indirect and group.objgen not in kept]
        groups.extend(own)
        hidden.extend(off)
        shown.extend(on)
        order.extend(_array(default.get(Name.Order)))
        locked.extend(_groups(default.get(Name.Locked)))
    if not len(groups):
        return
    configuration = Dictionary(BaseState=Name.ON, OFF=hidden, ON=shown, Order=order)
    if len(locked):
        configuration.Locked = locked
    packet.Root.OCProperties = Dictionary(OCGs=groups, D=configuration)
