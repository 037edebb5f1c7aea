"""Which address a request came from.

The socket peer, unless the peer is a trusted proxy: then the right-most
X-Forwarded-For entry that is not itself a trusted proxy. Right-most, because
everything to its left was written by the client and can be forged.
"""

from __future__ import annotations

import ipaddress


def _normalise(text: str) -> str | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def client_address(peer: str | None, forwarded_for: str | None, trusted: frozenset[str]) -> str | None:
    address = _normalise(peer) if peer else None
    if address is None or address not in trusted or not forwarded_for:
        return address
    for hop in reversed(forwarded_for.split(",")):
        candidate = _normalise(hop)
        if candidate is None:
            return address  # garbage in the chain: believe only the socket
        if candidate not in trusted:
            return candidate
    return address
