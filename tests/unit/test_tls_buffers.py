"""Which pages of a TLS read buffer are given back (proxy.http.tls_buffers):
only whole ones strictly inside it, never glibc's bookkeeping beside it.
The release itself: tests/component/test_tls_read_buffers.py."""

from __future__ import annotations

from proxy.http.tls_buffers import PAGE, interior_pages


def test_only_whole_pages_inside_the_buffer_are_given_back() -> None:
    assert interior_pages(PAGE, 64 * PAGE) == (PAGE, 64 * PAGE)
    assert interior_pages(PAGE + 16, 64 * PAGE) == (2 * PAGE, 63 * PAGE)
    assert interior_pages(PAGE + 16, PAGE) == (2 * PAGE, 0)
