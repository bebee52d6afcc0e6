"""``quire keys rotate``: the signer's next key version signs from now on.

The signer keeps every earlier version for verification (``quire verify``
trusts all of them); rotation is an operator's call to the signer's
``RotateKey``, made once per ``--request-id`` (a retry with the same id
returns the same version). Prints the version and its certificate's
sha256, never key material.
"""

from __future__ import annotations

import argparse

from quire.cli.args import operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output, message_dict
from quire.client import new_request_id
from quire.signer.v1 import signer_service_pb2 as signer_pb
from quire.signer.v1 import signer_service_pb2_grpc as signer_grpc
from quire.tls import aio_channel

__all__ = ["keys_rotate"]

TIMEOUT_SECONDS = 60.0


async def keys_rotate(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    request = signer_pb.RotateKeyRequest(request_id=args.request_id or new_request_id())
    async with aio_channel(config.signer, config.tls) as channel:
        key = await signer_grpc.SignerServiceStub(channel).RotateKey(
            request, metadata=operator_metadata(config), timeout=TIMEOUT_SECONDS
        )
    out.line(f"signing key {key.version} now signs  certificate sha256={key.certificate_sha256}")
    out.result({"key": {**message_dict(key), "active": key.active}})
    return ExitCode.OK
