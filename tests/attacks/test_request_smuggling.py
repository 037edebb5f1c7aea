"""Given a tenant that sends a compressed request body crafted so that, once
inflated, it holds a second request of its own making, then that request
never reaches the API server: the body crosses the gateway as sent, under
its own Content-Length, and the connections the gateway shares between
tenants stay in step.

Had the gateway inflated the body and relayed it under the compressed
length, the API server would have read the rest as the next request on
that connection; a request with a large Content-Length and no body would
then take the next tenant's request (its token included) as its body."""

from __future__ import annotations

import gzip
import struct
import zlib
from typing import Any

import pytest
import yaml

from tests.support.gatewayclient import tenant

pytestmark = pytest.mark.cluster


def gzip_of_length(data: bytes, length: int) -> bytes:
    """`data` gzipped into exactly `length` bytes, padded with a header
    comment (which changes nothing it inflates to)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = deflate.compress(data) + deflate.flush()
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    fixed = 10 + len(raw) + len(trailer) + 1  # the header, the comment's end
    assert length >= fixed, (length, fixed)
    header = b"\x1f\x8b\x08\x10\x00\x00\x00\x00\x02\xff"  # FLG: FCOMMENT
    blob = header + b"x" * (length - fixed) + b"\x00" + raw + trailer
    assert gzip.decompress(blob) == data and len(blob) == length
    return blob


async def test_a_compressed_body_cannot_smuggle_a_request_to_the_api_server(gateway: Any) -> None:
    attacker, attacker_ws = await tenant(gateway)
    victim, victim_ws = await tenant(gateway)
    token = yaml.safe_load(await attacker.kubeconfig())["users"][0]["user"]["token"]
    namespace = attacker_ws["namespace"]
    # The smuggled request: the attacker's own, as it could send directly,
    # except that it must not exist at all.
    smuggled = (f"POST /api/v1/namespaces/{namespace}/configmaps HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                'Content-Length: 38\r\n\r\n{"metadata":{"name":"smuggled-in"}}   ').encode()
    visible = b'{"metadata":{"name":"visible"}}'
    length = 4000  # past what the smuggled request (its token is ~1 KB) compresses to
    body = gzip_of_length(visible + b" " * (length - len(visible)) + smuggled, length)
    configmaps = f"/k8s/{attacker_ws['id']}/api/v1/namespaces/{namespace}/configmaps"
    answer = await attacker.call("POST", configmaps, data=body, headers={
        "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert 400 <= answer.status < 500, (answer.status, await answer.text())

    # The connections it went over carry other tenants' requests in step.
    victim_path = f"/k8s/{victim_ws['id']}/api/v1/namespaces/{victim_ws['namespace']}/configmaps/kube-root-ca.crt"
    for _ in range(20):
        mine = await victim.call("GET", victim_path)
        assert mine.status == 200, await mine.text()
        assert (await mine.json())["metadata"]["namespace"] == victim_ws["namespace"]
    for name in ("smuggled-in", "visible"):
        missing = await attacker.call("GET", f"{configmaps}/{name}")
        assert missing.status == 404, (name, missing.status)
