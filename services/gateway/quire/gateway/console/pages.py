"""What every console page shares: who is signed in, what they may open,
the CSRF check of each form, and the one place a refusal becomes a page.

A page is a function of the request and the person's ``Staff`` stubs;
``serve`` runs it. Without a session the person is sent to sign in; a
reviewer opening an operator's page gets 403; a service's refusal is shown
with its HTTP status and stable reason code (the service's own message,
which never holds document content); a token the services no longer accept
(revoked) ends the session.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from quire.gateway.console.csrf import matches
from quire.gateway.console.sessions import PATH, Session, Sessions
from quire.gateway.console.staff import Staff, StaffChannels
from quire.gateway.problems import http_status
from quire.grpcstatus import details_of
from quire.reasons import ReasonCode

__all__ = [
    "Console",
    "Refusal",
    "SECURITY_HEADERS",
    "console_of",
    "form_of",
    "render",
    "request_id_of",
    "serve",
]

SECURITY_HEADERS = {
    # Pages show what tenants sent: never kept by a browser or a proxy.
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; img-src 'self'; style-src 'self'; form-action 'self';"
        " frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}

Page = Callable[[Request, Staff], Awaitable[Response]]


@dataclass(frozen=True)
class Console:
    """The console's parts, built once with the gateway's app."""

    templates: Jinja2Templates
    sessions: Sessions
    channels: StaffChannels
    trace_url: str
    """``QUIRE_CONSOLE_TRACE_URL``: a link with ``{trace_id}``, or empty."""


class Refusal(Exception):
    """The console itself refuses: a reviewer on an operator's page, a form
    without its CSRF secret, a request that names nothing."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def request_id_of(text: str) -> str:
    """The form's request id (made when its page was served, so a form
    posted twice is one request); a new one when it is not a UUID."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return str(uuid.uuid4())


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def render(
    request: Request,
    template: str,
    session: Session | None,
    *,
    status: int = 200,
    **context: Any,
) -> Response:
    """A page from its template, with the console's headers."""
    response = console_of(request).templates.TemplateResponse(
        request, template, {"session": session, "root": PATH, **context}, status_code=status
    )
    response.headers.update(SECURITY_HEADERS)
    return response


async def form_of(request: Request, session: Session) -> FormData:
    """The posted form, once its CSRF secret is the session's."""
    form = await request.form()
    if not matches(session.csrf, str(form.get("csrf", ""))):
        raise Refusal(
            403, ReasonCode.CSRF_TOKEN_INVALID, "this form has expired; open the page again"
        )
    return form


async def serve(request: Request, page: Page, *, operators_only: bool = False) -> Response:
    """Run ``page`` for the signed-in person; every refusal is a page."""
    console = console_of(request)
    session = console.sessions.of(request)
    if session is None:
        return RedirectResponse(f"{PATH}/sign-in", status_code=303)
    try:
        if operators_only and not session.is_operator:
            raise Refusal(403, ReasonCode.REVIEWER_NOT_ALLOWED, "this page is for operators")
        return await page(request, Staff(console.channels, session))
    except Refusal as refusal:
        return _refused(request, session, refusal.status, refusal.reason, refusal.message)
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.UNAUTHENTICATED:
            response = RedirectResponse(f"{PATH}/sign-in", status_code=303)
            console.sessions.end(response, request)
            return response
        reason = details_of(error).reason or error.code().name
        return _refused(
            request, session, http_status(error.code(), reason), reason, error.details() or ""
        )
    except LookupError as missing:  # a service the console was not told about
        return _refused(request, session, 503, ReasonCode.DEPENDENCY_UNAVAILABLE, str(missing))


def _refused(
    request: Request, session: Session, status: int, reason: str, message: str
) -> Response:
    return render(request, "refused.html", session, status=status, reason=reason, message=message)
