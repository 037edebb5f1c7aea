"""Which address a request came from, and which scheme the browser used.

The socket peer, unless the peer is a trusted proxy: then the right-most
X-Forwarded-For entry that is not itself a trusted proxy. Right-most, because
everything to its left was written by the client and can be forged. Likewise
X-Forwarded-Proto is believed only from a trusted proxy (a TLS-terminating
ingress talks plain HTTP to the gateway).
"""

from __future__ import annotations

import ipaddress
import re


def canonical(text: str) -> str | None:
    """One spelling per address (ports, brackets and zones dropped, IPv4-mapped
    IPv6 as IPv4), or None for anything that is not an IP address."""
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # A link-local IPv6 peer arrives as "fe80::1%eth0": the zone names an
    # interface of this host, says nothing about the client, and is not
    # valid in PostgreSQL's inet (the audit column).
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            address = ipaddress.IPv6Address(text.split("%", 1)[0])
        # A dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d; trusted
        # proxies are configured, and audited, by their IPv4 address.
        address = address.ipv4_mapped or address
    return str(address)


def client_address(peer: str | None, forwarded_for: list[str], trusted: frozenset[str]) -> str | None:
    """`forwarded_for`: every X-Forwarded-For line, in order. A proxy may
    append a line of its own rather than extend the client's: the lines are
    one list (RFC 9110 5.3), so a forged first line is never the rightmost."""
    address = canonical(peer) if peer else None
    hops = [hop for line in forwarded_for for hop in line.split(",")]
    if address is None or address not in trusted or not hops:
        return address
    for hop in reversed(hops):
        candidate = canonical(hop)
        if candidate is None:
            return address  # garbage in the chain: believe only the socket
        if candidate not in trusted:
            return candidate
    return address


# One IPv6 subscriber gets a whole /64 (RFC 6177): counted per address, each
# of its 2^64 addresses would get a limit of its own.
_IPV6_SUBSCRIBER_PREFIX = 64


def rate_subject(address: str | None) -> str:
    """What a per-address rate limit counts: the address itself, but for
    IPv6 the /64 it lies in."""
    if address is None:
        return "unknown"
    parsed = ipaddress.ip_address(address)
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((parsed, _IPV6_SUBSCRIBER_PREFIX), strict=False))
    return address


# RFC 3986 host (a registered name or an IP literal) and an optional port:
# what a Host header may hold when the gateway builds a URL from it.
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]+)(?::[0-9]{1,5})?")


def is_host(text: str) -> bool:
    """Whether a Host header is a host and optional port, nothing else (no
    spaces, tabs, control characters, non-ASCII, userinfo or path)."""
    return _HOST.fullmatch(text) is not None


def public_scheme(own_scheme: str, peer: str | None, forwarded_proto: str | None, trusted: frozenset[str]) -> str:
    if not peer or forwarded_proto is None or canonical(peer) not in trusted:
        return own_scheme
    # A chain of proxies appends; the first entry is what the browser used.
    first = forwarded_proto.split(",", 1)[0].strip().lower()
    return first if first in ("http", "https") else own_scheme
