"""Where the operator tools get what the services keep: never from their
tables, always from the services (``quire.export.v1``).

- ``asked``: a running stack's services are asked (``ExportRecords``,
  through ``quire.client.RecordsClient``) with the operator token, at the
  addresses ``QUIRE_<SERVICE>_ADDR`` names, else ``stack.json``'s;
- ``exported``: a stopped stack's records are exported by each service's
  own distribution from its own database (``python -m quire.storedexport``,
  a process of its own, read-only), as the same pages.

``gather`` picks one: a stack that is not running (``stopped``, or its
lock free: ``quire.stack.running``) is exported, any other is asked.
Either way the answer is a service's claim: the tools verify it against
the hashed bytes, and report what disagrees.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from quire.client import RecordsClient
from quire.export.v1 import export_service_pb2 as pb
from quire.grpcstatus import reason_of
from quire.settings import service_address_var
from quire.stack.info import STACK_FILE, StackInfo
from quire.stack.running import stack_running
from quire.storedexport import read_frames
from quire.tls import TlsSettings

__all__ = ["Wanted", "ServiceRecords", "RecordsUnavailable", "gather", "asked", "exported"]

Wanted = Mapping[str, Sequence["pb.Collection"]]
"""The collections to read, by service, each service's in the order given."""

EXPORT_TIMEOUT_SECONDS = 600.0
"""A stopped stack's whole export; a ledger of millions of rows takes minutes."""


class RecordsUnavailable(Exception):
    """The services' records could not be had: a service did not answer or
    refused, or a stopped stack's export failed. The message names services,
    collections and status codes only."""


@dataclass(frozen=True)
class ServiceRecords:
    """What the services answered: each service's pages, by collection."""

    pages: Mapping[str, Mapping[int, list[pb.ExportRecordsResponse]]]
    missing: tuple[str, ...] = ()
    """Services whose database does not exist (a stopped stack's that never ran)."""

    def records(self, service: str, collection: pb.Collection) -> list[pb.Record]:
        """Every record of ``service``'s ``collection``, in its order."""
        pages = self.pages.get(service, {}).get(collection, [])
        return [record for page in pages for record in page.records]

    def sequence_gaps_are_deletions(self, service: str, collection: pb.Collection) -> bool:
        pages = self.pages.get(service, {}).get(collection, [])
        return bool(pages) and pages[0].sequence_gaps_are_deletions


def _addresses(data_dir: Path, env: Mapping[str, str], services: Sequence[str]) -> dict[str, str]:
    info = StackInfo.read(data_dir) if (data_dir / STACK_FILE).is_file() else None
    found = {}
    for service in services:
        address = env.get(service_address_var(service)) or (
            info.endpoints.get(service, "") if info else ""
        )
        if not address:
            raise RecordsUnavailable(
                f"no address for {service}: set {service_address_var(service)} "
                "or run against `quire up`"
            )
        found[service] = address
    return found


def _operator_token(data_dir: Path, env: Mapping[str, str]) -> str:
    token = env.get("QUIRE_OPERATOR_TOKEN", "")
    if not token and (data_dir / STACK_FILE).is_file():
        token = StackInfo.read(data_dir).operator_token()
    if not token:
        raise RecordsUnavailable("no operator token: set QUIRE_OPERATOR_TOKEN")
    return token


async def _ask(wanted: Wanted, client: RecordsClient) -> ServiceRecords:
    pages: dict[str, dict[int, list[pb.ExportRecordsResponse]]] = defaultdict(dict)
    for service, collections in wanted.items():
        for collection in collections:
            try:
                pages[service][collection] = [
                    page async for page in client.pages(service, collection)
                ]
            except grpc.aio.AioRpcError as error:
                said = " ".join(part for part in (error.code().name, reason_of(error)) if part)
                raise RecordsUnavailable(
                    f"{service} did not export {pb.Collection.Name(collection)}: {said}"
                ) from None
    return ServiceRecords(pages)


def asked(
    wanted: Wanted,
    addresses: Mapping[str, str],
    operator_token: str,
    *,
    tls: TlsSettings | None = None,
) -> ServiceRecords:
    """``wanted``, asked of the running services at ``addresses``, on an
    event loop of its own (the caller may be on one)."""

    async def ask() -> ServiceRecords:
        services = {service: addresses[service] for service in wanted}
        async with RecordsClient(services, operator_token, tls=tls) as client:
            return await _ask(wanted, client)

    with ThreadPoolExecutor(1, thread_name_prefix="records") as pool:
        return pool.submit(asyncio.run, ask()).result()


def _export_env(data_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for the export process: the settings the services would read
    there, and of this process's environment only what runs a process."""
    own = {k: v for k, v in os.environ.items() if not k.startswith("QUIRE_")}
    return {**own, **env, "QUIRE_DATA_DIR": str(data_dir)}


def exported(
    wanted: Wanted, data_dir: Path, env: Mapping[str, str], *, stopped: bool
) -> ServiceRecords:
    """``wanted``, exported by each service from its own database."""
    command = [sys.executable, "-m", "quire.storedexport", *(["--stopped"] if stopped else [])]
    names = {pb.Collection.Name(c) for collections in wanted.values() for c in collections}
    command += [f"--collection={name}" for name in sorted(names)]
    try:
        done = subprocess.run(
            [*command, *wanted],
            env=_export_env(data_dir, env),
            capture_output=True,
            timeout=EXPORT_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RecordsUnavailable("the services' export did not end in time") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise RecordsUnavailable(f"the services' export failed: {said[-1] if said else '-'}")
    pages: dict[str, dict[int, list[pb.ExportRecordsResponse]]] = defaultdict(dict)
    missing: list[str] = []
    try:
        for frame in read_frames(done.stdout):
            if frame.HasField("database_missing"):
                missing.append(frame.database_missing)
                continue
            page = frame.page
            pages[page.service].setdefault(page.collection, []).append(page)
    except ValueError as error:
        raise RecordsUnavailable(f"the services' export is cut off: {error}") from None
    return ServiceRecords(pages, missing=tuple(missing))


def gather(
    wanted: Wanted, data_dir: Path, env: Mapping[str, str], *, stopped: bool | None = None
) -> ServiceRecords:
    """``wanted``, from the running services, or exported when the stack in
    ``data_dir`` is not running: ``stopped``, or (None) nothing holds its
    lock. ``stopped`` False on a stack that is not running exports the
    databases as a running stack's would be read (SQLite ``mode=ro``)."""
    running = stack_running(data_dir)
    if stopped is None:
        stopped = running is False
    if stopped or running is False:
        return exported(wanted, data_dir, env, stopped=stopped)
    return asked(
        wanted,
        _addresses(data_dir, env, list(wanted)),
        _operator_token(data_dir, env),
        tls=TlsSettings.from_env(env),
    )
