"""The console's routes, templates and parts, added to the gateway's app."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from quire.admission.v1 import batch_pb2
from quire.gateway.console import batches, deadletters, images, reviews, signin, timeline
from quire.gateway.console.pages import Console
from quire.gateway.console.sessions import PATH, Sessions
from quire.gateway.console.staff import StaffChannels
from quire.jobs import state_name

__all__ = ["mount_console"]

HERE = Path(__file__).parent


def _when(stamp: Any) -> str:
    """A protobuf Timestamp or a datetime, to the second, in UTC."""
    moment = stamp.ToDatetime() if hasattr(stamp, "ToDatetime") else stamp
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else ""


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def mount_console(
    app: FastAPI, channels: StaffChannels, *, key: bytes, session_seconds: float, trace_url: str
) -> None:
    """Serve the console on ``app`` under ``/console``."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters["when"] = _when
    templates.env.filters["duration"] = _duration
    templates.env.filters["state"] = state_name
    templates.env.filters["batch_state"] = lambda value: batch_pb2.BatchState.Name(
        value
    ).removeprefix("BATCH_STATE_")
    # Made when a form is served: a form posted twice is one request.
    templates.env.globals["new_request_id"] = lambda: str(uuid.uuid4())
    app.state.console = Console(
        templates=templates,
        sessions=Sessions(key, session_seconds=session_seconds),
        channels=channels,
        trace_url=trace_url,
    )
    for module in (signin, reviews, images, timeline, deadletters, batches):
        app.include_router(module.router)
    app.mount(f"{PATH}/static", StaticFiles(directory=HERE / "static"), name="console-static")
