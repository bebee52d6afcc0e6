"""Cross-site request forgery: every form the console serves carries a
secret the browser's cookie alone cannot supply, and every POST is refused
(403, ``CSRF_TOKEN_INVALID``) without it.

Signed in, the secret is the session's own (sealed in the session cookie).
The sign-in form, before any session, uses a double-submit pair: a random
value in a short-lived ``HttpOnly``, ``SameSite=Strict`` cookie and the same
value in the form. ``SameSite=Strict`` on both cookies is a second wall:
a cross-site POST carries neither.
"""

from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

from quire.gateway.console.sessions import PATH

__all__ = ["SIGN_IN_COOKIE", "matches", "sign_in_secret", "set_sign_in_secret"]

SIGN_IN_COOKIE = "quire_console_sign_in"
SIGN_IN_SECONDS = 600


def matches(expected: str, given: str) -> bool:
    """Constant-time comparison; an empty secret never matches."""
    return bool(expected) and hmac.compare_digest(expected.encode(), given.encode())


def sign_in_secret(request: Request) -> str:
    """The sign-in form's secret from its cookie, or a new one."""
    return request.cookies.get(SIGN_IN_COOKIE, "") or secrets.token_urlsafe(32)


def set_sign_in_secret(response: Response, secret: str, *, secure: bool) -> None:
    response.set_cookie(
        SIGN_IN_COOKIE,
        secret,
        max_age=SIGN_IN_SECONDS,
        path=PATH,
        httponly=True,
        secure=secure,
        samesite="strict",
    )
