"""The ``quire`` command.

gRPC's C core logs on its own (``dns_resolver.cc:554 …``) before our one-line
errors; a command line shows only its own lines, so the core is told to be
quiet before any module imports grpc (``GRPC_VERBOSITY`` set in the
environment still wins)."""

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")
os.environ.setdefault("GRPC_TRACE", "")
