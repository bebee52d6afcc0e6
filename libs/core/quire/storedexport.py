"""A stopped stack's records, exported by each service's own distribution
from its own database::

    python -m quire.storedexport [--stopped] [--collection NAME]... SERVICE...

Each service declares what it owns under the ``quire.records`` entry-point
group: a function of the environment returning its ``Collections``
(``quire.exportrecords``), the very readers its running ``ExportRecords``
serves. For each service named, this opens the service's database where the
service itself would (``ServiceSettings``: ``QUIRE_<SERVICE>_DATABASE_URL``,
else SQLite under ``QUIRE_DATA_DIR``) without ever writing to it
(``quire.readonlydb``; ``--stopped`` opens SQLite immutable), and writes to
stdout, length-delimited (a varint length, then the message), one
``ExportFrame`` per page, all of a service's pages read in one transaction;
or ``database_missing`` for a service whose database does not exist.

It runs in a process of its own: the operator tools (``quire check``,
``quire retention``) start it and read the frames, and never import a
service's code. It exits 69 when a named service is not installed, 78 when
its settings are unusable; messages name services and settings only.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from typing import BinaryIO

from sqlalchemy import Connection

from quire.errors import InvalidSetting
from quire.export.v1 import export_service_pb2 as pb
from quire.exportrecords import Collections
from quire.paging import MAX_PAGE_SIZE, Position
from quire.readonlydb import database_exists, read_only_engine
from quire.settings import ServiceSettings

__all__ = [
    "ENTRY_POINTS",
    "NOT_INSTALLED",
    "BAD_SETTINGS",
    "main",
    "read_frames",
    "write_frame",
]

ENTRY_POINTS = "quire.records"
"""The entry-point group under which each service names its collections."""
NOT_INSTALLED = 69
BAD_SETTINGS = 78
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""A frame is one page: far below this; a longer length is a broken stream."""


def write_frame(stream: BinaryIO, frame: pb.ExportFrame) -> None:
    """``frame``, preceded by its length as a varint."""
    data = frame.SerializeToString()
    length, prefix = len(data), bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        prefix.append(byte | (0x80 if length else 0))
        if not length:
            break
    stream.write(bytes(prefix) + data)


def _length(data: bytes, at: int) -> tuple[int, int]:
    length, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a frame's length is cut off")
        byte = data[at]
        length |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return length, at


def read_frames(data: bytes) -> Iterator[pb.ExportFrame]:
    """The frames ``write_frame`` wrote into ``data``; ValueError when cut off."""
    at = 0
    while at < len(data):
        length, at = _length(data, at)
        if length > MAX_FRAME_BYTES or at + length > len(data):
            raise ValueError("a frame is cut off")
        yield pb.ExportFrame.FromString(data[at : at + length])
        at += length


def _pages(
    collections: Collections, collection: pb.Collection, connection: Connection
) -> Iterator[pb.ExportRecordsResponse]:
    after: Position | None = None
    while True:
        page = collections.page(collection, connection, after=after, size=MAX_PAGE_SIZE)
        yield page.response
        if not page.more:
            return
        after = page.rows[-1][0]


def export_service(
    service: str,
    collections: Collections,
    env: Mapping[str, str],
    out: BinaryIO,
    *,
    stopped: bool,
    only: Sequence[pb.Collection] = (),
) -> None:
    """Write ``service``'s pages (of ``only``, else of every collection it owns)."""
    url = ServiceSettings.from_env(service, env).database_url
    if not database_exists(url):
        write_frame(out, pb.ExportFrame(database_missing=service))
        return
    engine = read_only_engine(url, stopped=stopped)
    try:
        with engine.begin() as connection:
            for collection in only or list(collections.readers):
                for response in _pages(collections, collection, connection):
                    write_frame(out, pb.ExportFrame(page=response))
    finally:
        engine.dispose()


def _collections_of(service: str, env: Mapping[str, str]) -> Collections | None:
    found = entry_points(group=ENTRY_POINTS, name=service)
    if not found:
        return None
    declared: Collections = next(iter(found)).load()(env)
    return declared


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m quire.storedexport")
    parser.add_argument("--stopped", action="store_true", help="no service is running")
    parser.add_argument(
        "--collection",
        action="append",
        default=[],
        choices=[name for name in pb.Collection.keys() if name != "COLLECTION_UNSPECIFIED"],
    )
    parser.add_argument("services", nargs="+")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = _arguments(argv)
    env = os.environ if env is None else env
    wanted = [pb.Collection.Value(name) for name in args.collection]
    out = sys.stdout.buffer
    for service in args.services:
        try:
            collections = _collections_of(service, env)
            if collections is None:
                print(f"quire-{service} is not installed: no records to export", file=sys.stderr)
                return NOT_INSTALLED
            only = [c for c in wanted if c in collections.readers]
            if wanted and not only:
                continue
            export_service(service, collections, env, out, stopped=args.stopped, only=only)
        except InvalidSetting as error:
            print(f"{service}: {error}", file=sys.stderr)
            return BAD_SETTINGS
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
