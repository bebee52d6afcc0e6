"""A local RFC 3161 timestamp authority for tests: an HTTP server on a free
loopback port answering TimeStampReq with tokens signed by a test TSA key
(pyHanko's reference timestamper does the signing)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from asn1crypto import keys, pem, tsp, x509

__all__ = ["LocalTsa"]


def _der(path: Path) -> bytes:
    data = path.read_bytes()
    return pem.unarmor(data)[2] if pem.detect(data) else data


class LocalTsa:
    def __init__(self, cert_file: Path, key_file: Path) -> None:
        from pyhanko.sign.timestamps.dummy_client import DummyTimeStamper

        stamper = DummyTimeStamper(
            tsa_cert=x509.Certificate.load(_der(cert_file)),
            tsa_key=keys.PrivateKeyInfo.load(_der(key_file)),
        )

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", "0"))
                request = tsp.TimeStampReq.load(self.rfile.read(length))
                body = stamper.request_tsa_response(request).dump()
                self.send_response(200)
                self.send_header("Content-Type", "application/timestamp-reply")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/"

    def __enter__(self) -> LocalTsa:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
