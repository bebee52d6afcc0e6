"""Every service's main serves and drains through ``quire.servicerun``: the
steps run in one order, whichever service it is (a real gRPC server, stopped
by the SIGTERM a pod gets; the announcement is a recording stand-in)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import grpc

from quire.servicerun import ServiceRun
from quire.settings import ServiceSettings
from quire.stack.ports import free_port


class _Announcer:
    def __init__(self, said: list[str]) -> None:
        self._said = said

    async def start(self) -> None:
        self._said.append("announced")

    async def stop(self) -> None:
        self._said.append("withdrawn")


class _Open(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, details):  # type: ignore[no-untyped-def]
        return await continuation(details)


async def test_ready_loops_drain_and_close_run_in_one_order(tmp_path: Path) -> None:
    settings = ServiceSettings.from_env("audit", {"QUIRE_DATA_DIR": str(tmp_path)}).model_copy(
        update={
            "grpc_address": f"127.0.0.1:{free_port()}",
            "health_address": f"127.0.0.1:{free_port()}",
            "metrics_address": "",
            "drain_seconds": 5.0,
        }
    )
    said: list[str] = []
    run = ServiceRun(settings, access=_Open(), announcer=_Announcer(said))  # type: ignore[arg-type]
    looping = asyncio.Event()

    async def forever() -> None:
        said.append("loop")
        looping.set()
        try:
            await asyncio.Event().wait()
        finally:
            said.append("loop stopped")

    async def warm() -> None:
        said.append("warm")

    run.on_close(lambda: said.append("database closed"))
    run.on_close(lambda: said.append("connection closed"))
    run.on_ready(warm)
    run.on_ready(lambda: said.append("workers started"))
    run.loop(forever)
    run.on_drain(lambda: said.append("workers drained"))

    def failing_close() -> None:
        raise RuntimeError("no")

    run.on_close(failing_close)  # the others still close
    serving = asyncio.create_task(run.serve(register=lambda server: None, service_names=()))
    await asyncio.wait_for(looping.wait(), 30)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(serving, 30)
    assert said == [
        "warm",
        "workers started",
        "announced",  # the loops are started first, and run from the next turn
        "loop",
        "withdrawn",
        "loop stopped",
        "workers drained",
        "withdrawn",
        "connection closed",
        "database closed",
    ]
