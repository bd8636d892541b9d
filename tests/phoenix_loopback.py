"""``phoenix serve`` with its gRPC receiver on 127.0.0.1 instead of every interface.

Run by the Phoenix venv's own Python (tests/phoenix_server.py). Why: Phoenix binds its HTTP server
to ``PHOENIX_HOST`` but hard-codes ``[::]:<port>`` for the gRPC OTLP receiver
(``phoenix/server/grpc_server.py``: no setting binds or disables it without also turning the REST
API read-only), and our tests listen on loopback only. We export over HTTP and never use gRPC; this
wraps ``grpc.aio.server`` so the ports it adds are bound to 127.0.0.1. Phoenix itself runs unchanged.
"""

from __future__ import annotations

import sys

import grpc.aio

_make_server = grpc.aio.server


def _loopback_server(*args, **kwargs):
    server = _make_server(*args, **kwargs)
    for name in ("add_insecure_port", "add_secure_port"):
        add = getattr(server, name)

        def bind_loopback(address, *rest, _add=add):
            host, _, port = address.rpartition(":")
            return _add(f"127.0.0.1:{port}" if host in ("[::]", "0.0.0.0", "") else address, *rest)

        setattr(server, name, bind_loopback)
    return server


grpc.aio.server = _loopback_server

if __name__ == "__main__":
    from phoenix.server.main import main

    sys.argv = ["phoenix", *sys.argv[1:]]
    sys.exit(main())
