"""The HTTP gateway's application: a thin, stateless translator in front of
admission's gRPC API.

Built by ``create_app`` from its settings and a channel to admission; it
holds no database and no state of its own, so any number of replicas serve
alike and admission stays the only owner of intake.
"""

from __future__ import annotations

from typing import Any

import grpc
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from quire.gateway import batches, evidence, jobs, sources
from quire.gateway.admission import Admission
from quire.gateway.config import GatewaySettings
from quire.gateway.console.mount import mount_console
from quire.gateway.console.sessions import load_key
from quire.gateway.console.staff import StaffChannels
from quire.gateway.httpmetrics import RequestMetrics
from quire.gateway.problems import install_problem_handlers
from quire.gateway.schemas import Health, Problem
from quire.metrics import ServiceMetrics

__all__ = ["create_app", "openapi_document", "API_VERSION"]

API_VERSION = "1.0.0"
CALL_TIMEOUT_SECONDS = 30.0
BEARER = "bearerAuth"


def create_app(
    settings: GatewaySettings,
    channel: grpc.aio.Channel,
    metrics: ServiceMetrics | None = None,
    *,
    console: StaffChannels | None = None,
    console_key: bytes | None = None,
) -> FastAPI:
    """The gateway's app over ``channel`` to admission; the caller owns the
    channel. With ``metrics``, every request is counted and timed on them;
    with ``console`` (the staff services' channels, which the caller owns
    too), the operator console is served under ``/console``."""
    app = FastAPI(
        title="Quire HTTP API",
        version=API_VERSION,
        summary="Validated, assembled, signed PDF packets over HTTP.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.admission = Admission.over(
        channel,
        call_timeout_seconds=CALL_TIMEOUT_SECONDS,
        upload_chunk_bytes=settings.upload_chunk_bytes,
    )
    install_problem_handlers(app)
    if metrics is not None:
        app.add_middleware(RequestMetrics, metrics=metrics)
    app.include_router(jobs.router)
    app.include_router(evidence.router)
    app.include_router(sources.router)
    app.include_router(batches.router)
    if console is not None:
        mount_console(
            app,
            console,
            key=console_key or load_key(None),
            session_seconds=settings.console_session_seconds,
            trace_url=settings.console_trace_url,
        )

    @app.get("/healthz", response_model=Health, tags=["health"], summary="The gateway serves.")
    async def healthz() -> Health:
        return Health(status="ok")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI 3.1 document: FastAPI's, with the problem schema every error
    answer refers to, and bearer authentication on every route but /healthz."""
    document = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        routes=app.routes,
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem.pop("$defs", {}))
    schemas["Problem"] = problem
    document["components"]["securitySchemes"] = {
        BEARER: {"type": "http", "scheme": "bearer", "description": "A tenant's API token."}
    }
    document["security"] = [{BEARER: []}]
    document["paths"]["/healthz"]["get"]["security"] = []
    return _sorted(document)


def _sorted(value: Any) -> Any:
    """Keys in a stable order, so the committed document diffs cleanly."""
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value
