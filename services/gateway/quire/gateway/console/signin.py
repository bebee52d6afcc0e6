"""Signing in with a staff token, and out.

Admission, which owns the tokens, says whose token it is (``WhoAmI``): an
operator's or a reviewer's starts a session; a tenant's, a revoked or an
unknown one is refused with the same words, so the form tells nobody which
tokens exist.
"""

from __future__ import annotations

import grpc
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.gateway.console.csrf import SIGN_IN_COOKIE, matches, set_sign_in_secret, sign_in_secret
from quire.gateway.console.pages import console_of, form_of, render, serve
from quire.gateway.console.sessions import PATH, over_tls
from quire.gateway.console.staff import CALL_SECONDS, Staff
from quire.reasons import ReasonCode

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
MAX_TOKEN_CHARS = 512
ROLES = ("operator", "reviewer")


def _sign_in_page(request: Request, *, status: int = 200, refused: str = "") -> Response:
    secret = sign_in_secret(request)
    response = render(request, "sign_in.html", None, status=status, csrf=secret, refused=refused)
    set_sign_in_secret(response, secret, secure=over_tls(request))
    return response


@router.get(f"{PATH}/sign-in")
async def sign_in_form(request: Request) -> Response:
    return _sign_in_page(request)


@router.post(f"{PATH}/sign-in")
async def sign_in(request: Request) -> Response:
    form = await request.form()
    if not matches(request.cookies.get(SIGN_IN_COOKIE, ""), str(form.get("csrf", ""))):
        return render(
            request,
            "refused.html",
            None,
            status=403,
            reason=ReasonCode.CSRF_TOKEN_INVALID,
            message="this form has expired; open the sign-in page again",
        )
    token = str(form.get("token", "")).strip()
    refused = "not a staff token: sign in with an operator's or a reviewer's token"
    if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii() or not token.isprintable():
        return _sign_in_page(request, status=401, refused=refused)
    console = console_of(request)
    stub = admin_grpc.TenantAdminServiceStub(console.channels.admission)
    try:
        who = await stub.WhoAmI(
            admin_pb.WhoAmIRequest(),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=CALL_SECONDS,
            wait_for_ready=True,
        )
    except grpc.aio.AioRpcError as error:
        if error.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return _sign_in_page(request, status=401, refused=refused)
        raise
    role = who.role or "operator"
    if role not in ROLES:
        return _sign_in_page(request, status=401, refused=refused)
    response = RedirectResponse(f"{PATH}/reviews", status_code=303)
    console.sessions.start(response, request, token=token, name=who.token, role=role)
    response.delete_cookie(SIGN_IN_COOKIE, path=PATH)
    return response


@router.post(f"{PATH}/sign-out")
async def sign_out(request: Request) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        await form_of(request, staff.session)
        response = RedirectResponse(f"{PATH}/sign-in", status_code=303)
        console_of(request).sessions.end(response, request)
        return response

    return await serve(request, page)


@router.get(PATH)
@router.get(f"{PATH}/")
async def home(request: Request) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        return RedirectResponse(f"{PATH}/reviews", status_code=303)

    return await serve(request, page)
