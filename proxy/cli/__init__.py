"""The `tenant-gateway` console script: the client commands start without the server's imports.

kubectl runs `tenant-gateway credential` before every command; importing the
server (aiohttp, asyncpg, the Kubernetes client) would cost it most of a
second, so the client commands are dispatched before any of that loads, and
a cached token is answered before even the client's own argument parsing
loads (proxy.cli.client.cached).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself is not loaded at run time
if TYPE_CHECKING:
    from typing import Sequence

CLIENT_COMMANDS = frozenset({"login", "credential", "logout"})


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["credential"]:
        from proxy.cli.client.cached import answer

        answered = answer(args[1:])
        if answered is not None:
            return answered
    if args and args[0] in CLIENT_COMMANDS:
        from proxy.cli.client.commands import main as client_main

        return client_main(args)
    from proxy.cli.server import main as server_main

    return server_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
