"""Client addresses behind trusted proxies, the per-address rate-limit
subject, and rate-limit arithmetic. Pure."""

from __future__ import annotations

import pytest

from proxy.http.addresses import client_address, is_host, rate_subject
from proxy.routes.ratelimit import retry_after
from proxy.settings import RateLimit


@pytest.mark.parametrize("peer, xff, expected", [
    ("203.0.113.9", ["198.51.100.1"], "203.0.113.9"),  # untrusted peer: header ignored
    ("10.0.0.1", ["198.51.100.1"], "198.51.100.1"),
    ("10.0.0.1", ["6.6.6.6, 198.51.100.1"], "198.51.100.1"),  # left part is client-written
    ("10.0.0.1", ["198.51.100.1, 10.0.0.2"], "198.51.100.1"),  # skip trusted hops
    ("10.0.0.1", ["garbage"], "10.0.0.1"),
    ("10.0.0.1", [], "10.0.0.1"),
    ("fe80::1%eth0", [], "fe80::1"),  # the zone is this host's interface, not the client
    ("10.0.0.1", ["[fe80::2%25eth0]:443, fe80::3%lo"], "fe80::3"),
    ("::ffff:10.0.0.1", ["198.51.100.1"], "198.51.100.1"),  # dual-stack: the mapped trusted proxy
    # A proxy that appends its own line: the client's forged first line is not the rightmost.
    ("10.0.0.1", ["6.6.6.6", "198.51.100.1"], "198.51.100.1"),
    ("10.0.0.1", ["6.6.6.6", "198.51.100.1, 10.0.0.2"], "198.51.100.1"),
    ("10.0.0.1", ["198.51.100.1", "10.0.0.2"], "198.51.100.1"),
])
def test_client_address(peer: str, xff: list[str], expected: str) -> None:
    assert client_address(peer, xff, frozenset({"10.0.0.1", "10.0.0.2"})) == expected


@pytest.mark.parametrize("address, subject", [
    (None, "unknown"),
    ("198.51.100.7", "198.51.100.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),  # the same subscriber's other address
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
])
def test_per_address_limits_count_an_ipv6_slash_64_as_one_address(address: str | None, subject: str) -> None:
    assert rate_subject(address) == subject


def test_rate_limit_arithmetic() -> None:
    limit = RateLimit(3, 60)
    assert retry_after(3, 10.0, limit) is None
    assert retry_after(4, 10.2, limit) == 11
    assert retry_after(9, 0.0, limit) == 1


@pytest.mark.parametrize("host, valid", [
    ("gw.example", True), ("gw.example:8443", True), ("127.0.0.1:8080", True), ("[::1]:8443", True),
    ("[2001:db8::1]", True), ("xn--gtewy-gra.example", True),
    ("", False), ("gw\tx", False), ("g\u00e4tew\u00e4y", False), ("gw example", False), ("user@gw", False),
    ("gw/x", False), ("gw:99999x", False), ("gw:", False), ("gw\r\nX: y", False), ("[::1", False),
])
def test_a_host_header_is_a_host_and_a_port(host: str, valid: bool) -> None:
    assert is_host(host) is valid
