"""Which request heads the express lane reads itself (proxy.passthrough.express.read_head). Pure.

Whatever it does not read goes to aiohttp's strict parser with its bytes
untouched, for the rest of the connection: a head read here must be one
aiohttp would read the same way, and any doubt is a None.
"""

from __future__ import annotations

import pytest

from proxy.passthrough.express import INCOMPLETE, MAX_HEAD_BYTES, read_head

PLAIN = (b"GET /k8s/0b5e/api/v1/namespaces/tenant-1/configmaps?limit=5 HTTP/1.1\r\n"
         b"Host: gateway\r\nAuthorization: Bearer abc.def\r\nAccept:  application/json \r\n\r\n")


def test_a_plain_get_is_read_with_its_fields_and_length() -> None:
    head = read_head(PLAIN + b"GET /next")
    assert head == ("GET", "/k8s/0b5e/api/v1/namespaces/tenant-1/configmaps?limit=5",
                    [(b"Host", b"gateway"), (b"Authorization", b"Bearer abc.def"), (b"Accept", b"application/json")],
                    len(PLAIN))


def test_a_head_still_arriving_is_waited_for_up_to_its_bound() -> None:
    assert read_head(PLAIN[:-2]) is INCOMPLETE
    assert read_head(b"GET /k8s/x HTTP/1.1\r\nX-Long: " + b"a" * MAX_HEAD_BYTES) is None
    # Whole but past the bound (its lines may be past aiohttp's, which answers it).
    assert read_head(b"GET /k8s/x HTTP/1.1\r\nX-Long: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n") is None


@pytest.mark.parametrize("head", [
    b"get /k8s/x/api HTTP/1.1\r\nHost: g\r\n\r\n",
    b"GET /k8s/x/api HTTP/1.0\r\nHost: g\r\n\r\n",
    b"GET /k8s/x/a\xc3\xa9 HTTP/1.1\r\nHost: g\r\n\r\n",  # not ASCII in the target
    b"GET /k8s/x/api  HTTP/1.1\r\nHost: g\r\n\r\n",
    b"GET /k8s/x/api HTTP/1.1\nHost: g\r\n\r\n",  # a bare LF
    b"GET /k8s/x/api HTTP/1.1\r\nHost: g\nX: y\r\n\r\n",
    b"GET /k8s/x/api HTTP/1.1\r\nHost: g\r\n folded\r\n\r\n",  # obs-fold
    b"GET /k8s/x/api HTTP/1.1\r\nHost : g\r\n\r\n",  # space before the colon
    b"GET /k8s/x/api HTTP/1.1\r\nBad Name: g\r\n\r\n",
    b"GET /k8s/x/api HTTP/1.1\r\n: empty-name\r\n\r\n",
    b"GET /k8s/x/api HTTP/1.1\r\nX: a\x00b\r\n\r\n",  # NUL
    b"GET /k8s/x/api HTTP/1.1\r\nX: a\rb\r\n\r\n",  # a lone CR
    b"GET /k8s/x/api HTTP/1.1\r\nX: a\x7fb\r\n\r\n",  # DEL
    b"GET /k8s/x/api HTTP/1.1\r\nX: a\x1bb\r\n\r\n",  # ESC
    b"\r\nGET /k8s/x/api HTTP/1.1\r\nHost: g\r\n\r\n",  # a leading empty line
])
def test_anything_but_plain_http_1_1_is_left_to_aiohttp(head: bytes) -> None:
    assert read_head(head) is None


def test_a_tab_inside_a_value_is_kept_and_around_it_trimmed() -> None:
    head = read_head(b"GET /k8s/x/api HTTP/1.1\r\nX-A:\ta\tb\t\r\n\r\n")
    assert isinstance(head, tuple)
    assert head[2] == [(b"X-A", b"a\tb")]


@pytest.mark.parametrize("head", [
    b"POST /api/v1/auth/login HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
    b"HEAD /k8s/x/api HTTP/1.1\r\nHost: g\r\n\r\n",
    b"GET https://g/k8s/x/api HTTP/1.1\r\nHost: g\r\n\r\n",  # absolute form: the full path's to judge
])
def test_other_methods_and_targets_are_read_for_their_framing(head: bytes) -> None:
    read = read_head(head)
    assert isinstance(read, tuple) and read[3] == len(head)


@pytest.mark.parametrize("start", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello on a plain port
    b"GET /k8s/a HTTP/1.1\nHost: h\n",  # bare line feeds
    b"GET /k8s/a HTTP/1.1\r\nHost: h\n",
    b"GET /k8s/a HTTP/1.1\r\nHost: h\rX",
    b"get /k8s/a",
    b"PRI * HTTP/2.0",  # HTTP/2's preface: method-shaped, so waited for (its whole head is aiohttp's)
])
def test_a_start_that_can_never_be_a_plain_head_is_not_waited_for(start: bytes) -> None:
    """aiohttp answers these at once (400); the lane must not hold them for the rest of a head."""
    expected = INCOMPLETE if start.startswith(b"PRI ") else None
    assert read_head(start) is expected


def test_a_partial_plain_head_is_waited_for() -> None:
    for cut in (1, 3, 4, 20, len(PLAIN) - 3, len(PLAIN) - 1):
        assert read_head(PLAIN[:cut]) is INCOMPLETE, cut
