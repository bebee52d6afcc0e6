"""The console's sign-in: a staff token, checked once with admission, then a
sealed session cookie.

The cookie is a Fernet token (AES-CBC with an HMAC, from ``cryptography``)
holding the person's bearer token, its name and role, and the session's CSRF
secret. Nothing is kept server-side, so any gateway replica with the same
key serves the session; the key is ``QUIRE_CONSOLE_KEY_FILE``. A session ends
``session_seconds`` after the sign-in (Fernet's own time stamp), at sign-out
(the cookie is cleared), or as soon as a service refuses the token (revoked):
each page is asked of the services with the person's own token, so the
console never grants more than the token does.

The cookie is ``HttpOnly``, ``SameSite=Strict``, scoped to ``/console``, and
``Secure`` when the request came over TLS.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from starlette.requests import Request
from starlette.responses import Response

from quire.errors import InvalidSetting

__all__ = [
    "COOKIE",
    "PATH",
    "Session",
    "Sessions",
    "load_key",
    "over_tls",
]

COOKIE = "quire_console"
PATH = "/console"
KEY_VARIABLE = "QUIRE_CONSOLE_KEY_FILE"


@dataclass(frozen=True)
class Session:
    """One signed-in person."""

    token: str
    """Their bearer token, forwarded on every call the console makes for them."""
    name: str
    """``operators/-/tokens/{id}`` or ``reviewers/-/tokens/{id}``."""
    role: str
    """``operator`` or ``reviewer``."""
    csrf: str
    """The secret every form of this session carries back."""

    @property
    def is_operator(self) -> bool:
        return self.role == "operator"


def load_key(path: Path | None) -> bytes:
    """The Fernet key in ``path``; a fresh one when no file is configured
    (sessions then last only as long as this process)."""
    if path is None:
        return Fernet.generate_key()
    try:
        key = path.read_bytes().strip()
        Fernet(key)
    except (OSError, ValueError):
        raise InvalidSetting(KEY_VARIABLE, "a readable file holding a Fernet key") from None
    return key


class Sessions:
    """Seals and opens session cookies."""

    def __init__(self, key: bytes, *, session_seconds: float) -> None:
        self._fernet = Fernet(key)
        self._ttl = max(1, int(session_seconds))

    def start(
        self, response: Response, request: Request, *, token: str, name: str, role: str
    ) -> None:
        """Sign the person in: the sealed session in the cookie."""
        body = json.dumps(
            {"token": token, "name": name, "role": role, "csrf": secrets.token_urlsafe(32)}
        ).encode()
        response.set_cookie(
            COOKIE,
            self._fernet.encrypt(body).decode(),
            max_age=self._ttl,
            path=PATH,
            httponly=True,
            secure=over_tls(request),
            samesite="strict",
        )

    def of(self, request: Request) -> Session | None:
        """The request's session; None when there is none, it was tampered
        with, or it has expired."""
        sealed = request.cookies.get(COOKIE, "")
        if not sealed:
            return None
        try:
            body = json.loads(self._fernet.decrypt(sealed.encode(), ttl=self._ttl))
            return Session(
                token=str(body["token"]),
                name=str(body["name"]),
                role=str(body["role"]),
                csrf=str(body["csrf"]),
            )
        except (InvalidToken, ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def end(response: Response, request: Request) -> None:
        response.delete_cookie(
            COOKIE, path=PATH, httponly=True, secure=over_tls(request), samesite="strict"
        )


def over_tls(request: Request) -> bool:
    """The request came over TLS, to the gateway or to the proxy before it."""
    forwarded = request.headers.get("x-forwarded-proto", "")
    return request.url.scheme == "https" or forwarded.split(",")[0].strip() == "https"
