"""The command line's failures are one line, never a traceback (proxy.cli.client.commands).

Given a gateway that answers badly (a body cut short, JSON nested past the
parser's stack, a device sign-in answer whose numbers are not numbers), when
`tenant-gateway login` or `credential` runs, then it exits 1 with one line
saying what went wrong. The answers come over a real loopback socket from a
server that sends canned bytes: urllib and http.client read them as they
would any gateway's.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from proxy.cli.client import cached, commands, store

HANG = b""  # as a canned response: read the request, answer nothing until the server closes


class CannedServer:
    """Answers every connection on 127.0.0.1 with the next canned response (none: closed unanswered)."""

    def __init__(self, responses: list[bytes]) -> None:
        self.responses = list(responses)
        self.requests: list[bytes] = []
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:  # until close(); responses may be added after the URL is known
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                request = self._read_request(connection)
                if request is not None and self.responses:
                    self.requests.append(request)
                    response = self.responses.pop(0)
                    if response == HANG:
                        self._closed.wait()
                        continue
                    try:
                        connection.sendall(self._fill(response))
                    except OSError:  # the client hung up before reading it all
                        pass

    def _fill(self, response: bytes) -> bytes:
        """The response with "{url}" in its body made this server's URL and "{host}" its host:port."""
        head, _, body = response.partition(b"\r\n\r\n")
        if b"{url}" not in body and b"{host}" not in body:
            return response
        body = body.replace(b"{url}", self.url.encode()).replace(b"{host}", self.url.partition("://")[2].encode())
        return re.sub(rb"Content-Length: \d+", b"Content-Length: %d" % len(body), head) + b"\r\n\r\n" + body

    @staticmethod
    def _read_request(connection: socket.socket) -> bytes | None:
        """The whole request, body included: closing with bytes unread would reset the connection."""
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = connection.recv(65536)
            if not chunk:
                return None
            request += chunk
        head, _, body = request.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = connection.recv(65536)
            if not chunk:
                return None
            body += chunk
        return head + b"\r\n\r\n" + body

    def close(self) -> None:
        self._closed.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept()
        except OSError:
            pass
        self._listener.close()
        self._thread.join(timeout=5)


def answer(body: bytes, *, status: str = "200 OK", content_length: int | None = None,
           headers: str = "") -> bytes:
    length = len(body) if content_length is None else content_length
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n"
            f"{headers}Connection: close\r\n\r\n").encode() + body


def device_start(**fields: object) -> bytes:
    document = {"device_code": "d", "user_code": "BCDF-GHJK", "verification_uri": "{url}/device",
                "interval": 5, "expires_in": 600, **fields}
    return answer(json.dumps(document).encode())


SERVER = "https://k8s.example:6443"
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nthe cluster's CA\n-----END CERTIFICATE-----\n").decode()
MINTED_FOR = {"server": SERVER, "certificate_authority_data": CA}
"""What the gateway's token answer names besides the token: the workspace's cluster."""


def exec_info(**cluster: object) -> str:
    """KUBERNETES_EXEC_INFO as kubectl writes it for a kubeconfig with provideClusterInfo: true."""
    return json.dumps({"kind": "ExecCredential", "apiVersion": "client.authentication.k8s.io/v1",
                       "spec": {"interactive": False, "cluster": {
                           "server": SERVER, "certificate-authority-data": CA, **cluster}}})


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_EXEC_INFO", exec_info())  # kubectl, calling the workspace's own cluster
    yield tmp_path


def one_line_failure(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert commands.main(argv) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith(("To sign in", "and approve"))]
    assert len(lines) == 1 and lines[0].startswith("tenant-gateway: "), err
    assert "Traceback" not in err
    return lines[0]


def login(server: CannedServer) -> list[str]:
    return ["login", "--gateway", server.url, "--no-browser", "--poll-interval", "0.01"]


def login_failure(capsys: pytest.CaptureFixture[str], *answers: bytes) -> str:
    """`login` against a gateway that sends `answers`, one per request: its one line."""
    server = CannedServer(list(answers))
    try:
        return one_line_failure(capsys, login(server))
    finally:
        server.close()


@pytest.mark.parametrize("fields", [
    {"interval": "soon"}, {"interval": None}, {"interval": [5]}, {"interval": True},
    {"expires_in": "ten minutes"}, {"expires_in": {"s": 600}},
])
def test_a_device_answer_whose_numbers_are_not_numbers_is_one_line(
        capsys: pytest.CaptureFixture[str], fields: dict[str, object]) -> None:
    line = login_failure(capsys, device_start(**fields))
    assert "no valid" in line


def test_infinite_numbers_are_refused_too() -> None:
    """JSON as Python reads it takes `Infinity` and `NaN`, which int() cannot."""
    with pytest.raises(commands.CommandError):
        commands._seconds(json.loads('{"interval": Infinity}'), "interval", 5, 60)
    with pytest.raises(commands.CommandError):
        commands._seconds(json.loads('{"interval": NaN}'), "interval", 5, 60)
    assert commands._seconds({"interval": 10**12}, "interval", 5, 60) == 60
    assert commands._seconds({"interval": 0}, "interval", 5, 60) == 1
    assert commands._seconds({}, "interval", 5, 60) == 5


def test_an_answer_cut_short_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The gateway promised 100 bytes and closed after 5: http.client's IncompleteRead."""
    line = login_failure(capsys, answer(b'{"dev', content_length=100))
    assert "broken answer (IncompleteRead)" in line


def test_an_error_answer_cut_short_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = login_failure(capsys, answer(b'{"err', status="503 Service Unavailable", content_length=100))
    assert "broken answer" in line


def test_json_nested_past_the_parsers_stack_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    line = login_failure(capsys, answer(deep))
    assert "device sign-in could not start" in line


def test_a_token_answer_nested_past_the_parsers_stack_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`credential` with no cached token mints one; its answer is read the same way."""
    server = CannedServer([answer(b"{\"a\":" * 100_000 + b"1" + b"}" * 100_000)])
    path = store.credentials_path()
    store.write(path, {"gateways": {server.url: {"session": "s", "tokens": {}}}})
    try:
        line = one_line_failure(capsys, ["credential", "--gateway", server.url, "--workspace", "w"])
    finally:
        server.close()
    assert "no token for workspace w" in line


def test_a_poll_answer_cut_short_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = login_failure(capsys, device_start(interval=1), answer(b'{"tok', content_length=50))
    assert "broken answer" in line


def signed_in(server: CannedServer, **entry: object) -> None:
    """A stored session for `server` (no cached token unless `entry` has one)."""
    store.write(store.credentials_path(), {"gateways": {server.url: {"session": "s", "tokens": {}, **entry}}})


def credential(server: CannedServer, workspace: str = "w") -> list[str]:
    return ["credential", "--gateway", server.url, "--workspace", workspace]


@pytest.mark.parametrize("status", ["301 Moved Permanently", "302 Found", "303 See Other",
                                    "307 Temporary Redirect", "308 Permanent Redirect", "300 Multiple Choices"])
def test_a_redirect_is_refused_and_the_session_goes_nowhere_else(
        capsys: pytest.CaptureFixture[str], status: str) -> None:
    """urllib would follow it, copying `Authorization: Bearer <session>` to the new host."""
    elsewhere = CannedServer([answer(b'{"token": "t", "expires_at": "2999-01-01T00:00:00Z"}')])
    server = CannedServer([answer(b"", status=status, headers=f"Location: {elsewhere.url}/steal\r\n")])
    signed_in(server)
    try:
        line = one_line_failure(capsys, credential(server))
    finally:
        server.close()
        elsewhere.close()
    assert "redirect" in line and elsewhere.requests == []
    assert b"Authorization: Bearer s" in server.requests[0]


class DrippingServer:
    """Reads a request, then sends `head` and one byte of `drip` every 50 ms until the client hangs up."""

    def __init__(self, head: bytes, drip: bytes) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._head, self._drip = head, drip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            connection, _ = self._listener.accept()
        except OSError:
            return
        with connection:
            try:
                connection.recv(65536)
                connection.sendall(self._head)
                for byte in self._drip:
                    if self._stop.wait(0.05):
                        return
                    connection.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._thread.join(timeout=5)


@pytest.mark.parametrize("head, drip", [
    (b"", b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000),  # headers that never end
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n", b" " * 10_000),  # a body that never ends
], ids=["headers", "body"])
def test_an_answer_that_drips_is_cut_off_at_the_deadline(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, head: bytes, drip: bytes) -> None:
    """Each byte comes well within the per-read timeout; the whole exchange still ends on time."""
    monkeypatch.setattr(commands, "_TIMEOUT", 1)
    server = DrippingServer(head, drip)
    signed_in(server)  # type: ignore[arg-type]
    started = time.monotonic()
    try:
        line = one_line_failure(capsys, credential(server))  # type: ignore[arg-type]
    finally:
        server.close()
    assert "did not answer within 1 s" in line
    assert time.monotonic() - started < 30  # the drip alone would take minutes


def credential_failure(capsys: pytest.CaptureFixture[str], body: bytes) -> str:
    """`credential`'s one line when the gateway's token answer is `body`."""
    server = CannedServer([answer(body)])
    signed_in(server)
    try:
        return one_line_failure(capsys, credential(server))
    finally:
        server.close()


def test_an_answer_larger_than_the_cap_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert "answer larger than 1 MiB" in credential_failure(capsys, b'{"token": "' + b"t" * (1 << 20) + b'"}')


@pytest.mark.parametrize("command", ["login", "credential", "logout"])
def test_a_gateway_url_urllib_cannot_parse_is_one_line(capsys: pytest.CaptureFixture[str], command: str) -> None:
    argv = [command, "--gateway", "https://[::1"] + (["--workspace", "w"] if command == "credential" else [])
    assert "--gateway must be the gateway's URL" in one_line_failure(capsys, argv)


@pytest.mark.parametrize("gateways", [[], "x", 7, None])
def test_a_credentials_file_whose_gateways_is_not_an_object_reads_as_signed_out(
        capsys: pytest.CaptureFixture[str], gateways: object) -> None:
    """Hand-edited: `credential` says to log in, `logout` has nothing to end, `login` starts afresh."""
    path = store.credentials_path()
    store.write(path, {"gateways": gateways})
    line = one_line_failure(capsys, ["credential", "--gateway", "https://gw.example", "--workspace", "w"])
    assert "not signed in to https://gw.example" in line
    assert commands.main(["logout", "--gateway", "https://gw.example"]) == 0
    assert "not signed in" in capsys.readouterr().err
    store.write(path, {"gateways": gateways})
    server = CannedServer([device_start(), answer(b'{"token": "new", "expires_at": "2999-01-01T00:00:00Z"}')])
    try:
        assert commands.main(login(server)) == 0
    finally:
        server.close()
    assert store.read(path)["gateways"][server.url]["session"] == "new"


def test_cached_tokens_that_are_not_an_object_are_minted_afresh(capsys: pytest.CaptureFixture[str]) -> None:
    server = CannedServer([answer(json.dumps({"token": "t", "expires_at": _in(3600), **MINTED_FOR}).encode())])
    signed_in(server, tokens=["junk"])
    try:
        assert commands.main(credential(server)) == 0
    finally:
        server.close()
    assert json.loads(capsys.readouterr().out)["status"]["token"] == "t"


def _in(seconds: float) -> str:
    return (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)).isoformat()


@pytest.mark.parametrize("command", ["login", "credential", "logout"])
@pytest.mark.parametrize("url", ["http://gw.example", "http://10.0.0.1:8080", "http://[fe80::1]", "http://127.0.0.1.nip.io"])
def test_plain_http_is_refused_for_a_gateway_off_this_machine(
        capsys: pytest.CaptureFixture[str], command: str, url: str) -> None:
    """A bearer session would cross the network in clear text."""
    argv = [command, "--gateway", url] + (["--workspace", "w"] if command == "credential" else [])
    assert "plain http" in one_line_failure(capsys, argv)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "[::1]", "localhost", "LocalHost"])
def test_plain_http_is_accepted_on_loopback(host: str) -> None:
    assert commands._gateway(f"http://{host}:8080") == f"http://{host}:8080"


def test_a_token_cached_for_a_plain_http_gateway_is_not_answered_from_the_cache() -> None:
    """Stored before http was refused: the fast path leaves it to `credential`, which refuses it."""
    store.write(store.credentials_path(), {"gateways": {"http://gw.example": {
        "session": "s", "tokens": {"w": {"token": "t", "expires_at": _in(3600)}}}}})
    assert cached.answer(["--gateway", "http://gw.example", "--workspace", "w"]) is None


FAR = "9999-12-31T23:59:59-12:00"  # past datetime's range once in UTC


@pytest.mark.parametrize("expires_at", ["2000-01-01T00:00:00Z", _in(-5), "soon", None])
def test_a_minted_token_whose_expiry_is_past_or_unreadable_is_refused(
        capsys: pytest.CaptureFixture[str], expires_at: object) -> None:
    """kubectl would call again at once, for ever."""
    assert "no valid expiry" in credential_failure(capsys, json.dumps({"token": "t", "expires_at": expires_at,
                                                                             **MINTED_FOR}).encode())
    (entry,) = store.read(store.credentials_path())["gateways"].values()
    assert entry["tokens"] == {}  # nothing cached


@pytest.mark.parametrize("expires_at", [FAR, _in(3 * 3600)], ids=["absurd", "three-hours"])
def test_a_minted_token_that_seems_to_outlive_its_lifetime_is_used_until_the_longest_one(
        capsys: pytest.CaptureFixture[str], expires_at: str) -> None:
    """This machine's clock is behind the cluster's (or the answer
    exaggerates): the token is good, and kubectl asks again once the
    contract's 2 hours (and a little skew) from now have passed, by this
    clock, before the token really expires."""
    server = CannedServer([answer(json.dumps({"token": "t", "expires_at": expires_at, **MINTED_FOR}).encode())])
    signed_in(server)
    try:
        assert commands.main(credential(server)) == 0
    finally:
        server.close()
    status = json.loads(capsys.readouterr().out)["status"]
    until = cached.parse_time(status["expirationTimestamp"])
    assert status["token"] == "t" and until is not None
    assert abs((until - cached.now() - cached.LONGEST_LIFETIME).total_seconds()) < 5


def test_a_cached_token_whose_expiry_is_out_of_range_is_minted_afresh(capsys: pytest.CaptureFixture[str]) -> None:
    """Written by an older version or by hand: neither path turns it into a traceback."""
    server = CannedServer([answer(json.dumps({"token": "new", "expires_at": _in(7200), **MINTED_FOR}).encode())])
    signed_in(server, tokens={"w": {"token": "old", "expires_at": FAR, "server": SERVER, "ca": CA}})
    try:
        assert cached.answer(["--gateway", server.url, "--workspace", "w"]) is None
        assert commands.main(credential(server)) == 0
    finally:
        server.close()
    assert json.loads(capsys.readouterr().out)["status"]["token"] == "new"


DENIED = answer(b'{"error": {"code": "access_denied", "message": "no"}}', status="400 Bad Request")


def browser_login(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                  **fields: object) -> tuple[int, str, list[str]]:
    """`login` (browser allowed) against a device answer with `fields` ("{url}" is the gateway's URL,
    "{host}" its host:port), then a denial: its exit status, what it printed and what it asked the
    browser to open."""
    import webbrowser

    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    server = CannedServer([device_start(**fields), DENIED])
    try:
        status = commands.main(["login", "--gateway", server.url, "--poll-interval", "0.01"])
    finally:
        server.close()
    return status, capsys.readouterr().err, opened


@pytest.mark.parametrize("link", [
    "file:///etc/passwd", "javascript:alert(1)", "x-scheme-handler://{url}", "--new-window={url}/device",
    "-h", "https://evil.example/device", "{url}.evil.example/device", "{url}0/device",
    "http://127.0.0.1:1/device", "https://{host}/device", "http://evil@{host}/device", "http://evil.example\\@{host}/device",
    "{url}/device?user_code=\x1b]8;;https://evil.example\x07X", "{url}/device user_code", "http://{host}9999999/device",
])
def test_a_sign_in_link_off_the_gateways_origin_is_neither_printed_nor_opened(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, link: str) -> None:
    status, err, opened = browser_login(capsys, monkeypatch, verification_uri_complete=link,
                                        verification_uri=link)
    assert status == 1 and opened == [] and "To sign in" not in err
    assert "sign-in link is not on the gateway" in err and len(err.splitlines()) == 1


def test_the_bare_verification_uri_is_used_when_the_complete_one_is_off_origin(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    status, err, opened = browser_login(capsys, monkeypatch, verification_uri_complete="https://evil.example/",
                                        verification_uri="{url}/device")
    assert status == 1 and len(opened) == 1 and opened[0].endswith("/device")
    assert f"To sign in, open {opened[0]}\n" in err


def test_a_link_on_the_gateways_origin_is_printed_and_opened(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    status, err, opened = browser_login(capsys, monkeypatch,
                                        verification_uri_complete="{url}/device?user_code=BCDF-GHJK")
    assert status == 1 and len(opened) == 1 and opened[0].endswith("/device?user_code=BCDF-GHJK")
    assert f"To sign in, open {opened[0]}\nand approve the code BCDF-GHJK\n" in err


def test_terminal_escapes_from_the_gateway_are_never_printed(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A user code or an error message may not clear the screen, retitle the window or add a line."""
    import webbrowser

    monkeypatch.setattr(webbrowser, "open", lambda link: None)
    message = "denied\x1b[2J\x1b]0;owned\x07\r\ntenant-gateway: Signed in.\u202e"
    server = CannedServer([device_start(user_code="\x1b[2JBCDF\x1b[8m-GHJK"),
                           answer(json.dumps({"error": {"code": "x", "message": message}}).encode(),
                                  status="400 Bad Request")])
    try:
        assert commands.main(["login", "--gateway", server.url, "--poll-interval", "0.01"]) == 1
    finally:
        server.close()
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\r" not in err and "\u202e" not in err
    assert "approve the code [2JBCDF[8m-GHJK\n" in err
    assert err.splitlines()[-1] == "tenant-gateway: sign-in failed: denied[2J]0;ownedtenant-gateway: Signed in. (400)"


@pytest.mark.parametrize("revoked", [answer(b"", status="204 No Content"), answer(b"", status="500 Oops"), HANG],
                         ids=["ended", "refused", "unanswered"])
def test_login_ends_the_session_it_replaces(monkeypatch: pytest.MonkeyPatch, revoked: bytes) -> None:
    """Best effort and brief: whatever the gateway says to the logout, the new session is kept."""
    monkeypatch.setattr(commands, "_REVOKE_TIMEOUT", 2)  # room for the logout to reach the server on a busy machine
    server = CannedServer([device_start(), answer(json.dumps({"token": "new", "expires_at": _in(8 * 3600)}).encode()),
                           revoked])
    signed_in(server)  # session "s"
    started = time.monotonic()
    try:
        assert commands.main(login(server)) == 0
    finally:
        server.close()
    assert time.monotonic() - started < commands._TIMEOUT / 2  # not the exchanges' own deadline
    logout = server.requests[2]
    assert logout.startswith(b"POST /api/v1/auth/logout ") and b"Authorization: Bearer s\r\n" in logout
    assert store.read(store.credentials_path())["gateways"][server.url]["session"] == "new"


def test_a_first_login_revokes_nothing() -> None:
    server = CannedServer([device_start(), answer(json.dumps({"token": "new", "expires_at": _in(8 * 3600)}).encode())])
    try:
        assert commands.main(login(server)) == 0
    finally:
        server.close()
    assert len(server.requests) == 2



def test_login_names_itself_to_the_person_who_approves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The approval page shows this name (as the client's own claim) beside its address and time;
    a host name with control characters cannot dress it up."""
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "build-box\x1b[2J\u202e" + "x" * 200)
    server = CannedServer([device_start(), answer(json.dumps({"token": "new", "expires_at": _in(8 * 3600)}).encode())])
    try:
        assert commands.main(login(server)) == 0
    finally:
        server.close()
    start = server.requests[0]
    body = json.loads(start.partition(b"\r\n\r\n")[2])
    assert start.startswith(b"POST /api/v1/auth/device ")
    assert body["client_name"] == ("tenant-gateway CLI on build-box[2J" + "x" * 200)[:100]

ALL_THREE = [["login", "--gateway", "https://gw.example"], ["logout", "--gateway", "https://gw.example"],
             ["credential", "--gateway", "https://gw.example", "--workspace", "w"]]


def test_writing_never_follows_a_link_planted_at_a_predictable_temporary_name(config_home: Path) -> None:
    """The old temporary name was `.credentials.json.<pid>`, opened without O_EXCL or O_NOFOLLOW."""
    path = store.credentials_path()
    path.parent.mkdir(mode=0o700)
    victim = config_home / "victim"
    victim.write_text("untouched")
    (path.parent / f".{path.name}.{os.getpid()}").symlink_to(victim)
    store.write(path, {"gateways": {}})
    assert victim.read_text() == "untouched"
    assert json.loads(path.read_text()) == {"gateways": {}} and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, f".{path.name}.{os.getpid()}"])


def test_reading_and_locking_never_follow_a_link(capsys: pytest.CaptureFixture[str], config_home: Path) -> None:
    path = store.credentials_path()
    path.parent.mkdir(mode=0o700)
    elsewhere = config_home / "elsewhere.json"
    elsewhere.write_text(json.dumps({"gateways": {"https://gw.example": {"session": "planted", "tokens": {}}}}))
    path.symlink_to(elsewhere)
    assert store.read(path) == {}
    victim = config_home / "victim"
    path.with_name(path.name + ".lock").symlink_to(victim)
    line = one_line_failure(capsys, ["logout", "--gateway", "https://gw.example"])
    assert "cannot lock" in line and not victim.exists()


@pytest.mark.parametrize("argv", ALL_THREE, ids=["login", "logout", "credential"])
def test_a_directory_others_can_write_to_is_refused(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """Anyone who can write there could plant a session (kubectl would act in their workspace) or swap the file."""
    path = store.credentials_path()
    store.write(path, {"gateways": {"https://gw.example": {"session": "s", "tokens": {
        "w": {"token": "t", "expires_at": _in(7000)}}}}})
    path.parent.chmod(0o777)
    assert cached.answer(argv[1:]) is None if argv[0] == "credential" else True
    line = one_line_failure(capsys, argv)
    assert f"{path.parent} is writable by group or others; fix it with `chmod 700 {path.parent}`" in line


@pytest.mark.parametrize("argv", ALL_THREE, ids=["login", "logout", "credential"])
def test_a_directory_owned_by_someone_else_is_refused(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    path = store.credentials_path()
    store.write(path, {"gateways": {}})
    monkeypatch.setattr(os, "geteuid", lambda: path.parent.stat().st_uid + 1)
    line = one_line_failure(capsys, argv)
    assert f"{path.parent} belongs to another user" in line


@pytest.mark.parametrize("ca_file", ["/nonexistent/ca.pem", 7, "/dev/null"])
def test_a_ca_bundle_that_cannot_be_loaded_is_one_line(capsys: pytest.CaptureFixture[str], ca_file: object) -> None:
    """Gone since login, hand-edited, or not a bundle: credential says so; login still replaces such a session."""
    server = CannedServer([device_start(), answer(json.dumps({"token": "new", "expires_at": _in(8 * 3600)}).encode())])
    signed_in(server, ca_file=ca_file)
    try:
        assert "cannot use the CA bundle" in one_line_failure(capsys, credential(server))
        assert commands.main(login(server)) == 0  # the old session's logout, with that bundle, fails quietly
    finally:
        server.close()


# -- the token goes only to the workspace's own cluster --

ELSEWHERE = "https://k8s.attacker.example"


def cached_for_the_workspace(server: CannedServer) -> None:
    signed_in(server, tokens={"w": {"token": "cached", "expires_at": _in(3600), "server": SERVER, "ca": CA}})


def refused_without_a_token(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Exit 1, one line on stderr, nothing at all on stdout (kubectl reads the token there)."""
    assert commands.main(argv) == 1
    printed = capsys.readouterr()
    assert printed.out == "" and len(printed.err.splitlines()) == 1 and "Traceback" not in printed.err
    return printed.err


@pytest.mark.parametrize("cluster", [{"server": ELSEWHERE}, {"server": SERVER + "/k8s/other"},
                                     {"server": "http://k8s.example:6443"},
                                     {"certificate-authority-data": base64.b64encode(b"the attacker's CA").decode()},
                                     {"certificate-authority-data": None}, {"certificate-authority-data": "%%%"}],
                         ids=["another-server", "another-path", "plain-http", "another-ca", "no-ca", "ca-not-base64"])
def test_a_cached_token_is_never_handed_to_another_cluster(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cluster: dict[str, object]) -> None:
    """Given a shared kubeconfig whose server (or CA) is not the workspace's, when kubectl runs the
    plugin with a token cached, then neither path prints it and nothing is minted."""
    server = CannedServer([])
    cached_for_the_workspace(server)
    monkeypatch.setenv("KUBERNETES_EXEC_INFO", exec_info(**cluster))
    try:
        assert cached.answer(credential(server)[1:]) is None  # the fast path leaves it to the full one
        line = refused_without_a_token(capsys, credential(server))
    finally:
        server.close()
    assert line.startswith("tenant-gateway: refusing to hand workspace w's token to ") and server.requests == []


def test_a_fresh_token_is_not_handed_to_another_cluster_and_the_next_call_mints_nothing(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    server = CannedServer([answer(json.dumps({"token": "fresh", "expires_at": _in(7200), **MINTED_FOR}).encode())])
    signed_in(server)
    monkeypatch.setenv("KUBERNETES_EXEC_INFO", exec_info(server=ELSEWHERE))
    try:
        assert f"to {ELSEWHERE}: its cluster is {SERVER}" in refused_without_a_token(capsys, credential(server))
        assert f"to {ELSEWHERE}" in refused_without_a_token(capsys, credential(server))
        monkeypatch.setenv("KUBERNETES_EXEC_INFO", exec_info())
        assert commands.main(credential(server)) == 0  # the workspace's own cluster: from the cache
    finally:
        server.close()
    assert len(server.requests) == 1  # cached with the workspace's cluster, and refused from the cache
    assert json.loads(capsys.readouterr().out)["status"]["token"] == "fresh"


def test_the_fast_path_answers_the_workspaces_own_cluster_from_the_cache(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    store.write(store.credentials_path(), {"gateways": {"https://gw.example": {"session": "s", "tokens": {
        "w": {"token": "cached", "expires_at": _in(3600), "server": SERVER, "ca": CA}}}}})
    argv = ["--gateway", "https://gw.example", "--workspace", "w"]
    assert cached.answer(argv) == 0
    assert json.loads(capsys.readouterr().out)["status"]["token"] == "cached"
    monkeypatch.setenv("KUBERNETES_EXEC_INFO", exec_info(server=ELSEWHERE))
    assert cached.answer(argv) is None and capsys.readouterr().out == ""


@pytest.mark.parametrize("info", [None, "", "not json", json.dumps({"spec": {"interactive": False}}),
                                  json.dumps({"spec": {"cluster": {"server": 7}}}), "[" * 100_000],
                         ids=["unset", "empty", "not-json", "no-cluster", "server-not-text", "nested"])
def test_without_kubectls_cluster_no_token_is_handed_out_or_minted(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, info: str | None) -> None:
    """A kubeconfig with provideClusterInfo: false (an old download, or one made to hide its server)."""
    server = CannedServer([])
    cached_for_the_workspace(server)
    if info is None:
        monkeypatch.delenv("KUBERNETES_EXEC_INFO")
    else:
        monkeypatch.setenv("KUBERNETES_EXEC_INFO", info)
    try:
        assert cached.answer(credential(server)[1:]) is None
        assert "provideClusterInfo: true" in refused_without_a_token(capsys, credential(server))
        signed_in(server)  # nothing cached: still nothing minted
        assert "provideClusterInfo: true" in refused_without_a_token(capsys, credential(server))
    finally:
        server.close()
    assert server.requests == []


def test_a_kubeconfig_that_turns_tls_verification_off_gets_no_token(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    server = CannedServer([])
    cached_for_the_workspace(server)
    monkeypatch.setenv("KUBERNETES_EXEC_INFO", exec_info(**{"insecure-skip-tls-verify": True}))
    try:
        assert cached.answer(credential(server)[1:]) is None
        assert "turns TLS verification off" in refused_without_a_token(capsys, credential(server))
    finally:
        server.close()
    assert server.requests == []


@pytest.mark.parametrize("spelled", [SERVER + "/", "HTTPS://K8S.Example:6443", SERVER.replace(":6443", "")])
def test_the_same_server_spelled_another_way_is_the_same_and_a_port_is_not(spelled: str) -> None:
    same = cached.other_cluster({"server": spelled, "certificate-authority-data": CA}, SERVER, CA, "w") is None
    assert same is (spelled != SERVER.replace(":6443", ""))
    assert cached.other_cluster({"server": "https://gw.example:443/k8s/w"}, "https://gw.example/k8s/w/", "", "w") is None


def test_a_token_the_gateway_minted_without_naming_its_cluster_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """It could not be checked: not printed, not cached."""
    assert "did not name the workspace's cluster" in credential_failure(
        capsys, json.dumps({"token": "t", "expires_at": _in(7200)}).encode())
    (entry,) = store.read(store.credentials_path())["gateways"].values()
    assert entry["tokens"] == {}


def test_a_token_cached_without_its_cluster_by_an_older_version_is_minted_afresh(
        capsys: pytest.CaptureFixture[str]) -> None:
    server = CannedServer([answer(json.dumps({"token": "new", "expires_at": _in(7200), **MINTED_FOR}).encode())])
    signed_in(server, tokens={"w": {"token": "old", "expires_at": _in(3600)}})
    try:
        assert cached.answer(credential(server)[1:]) is None
        assert commands.main(credential(server)) == 0
    finally:
        server.close()
    assert json.loads(capsys.readouterr().out)["status"]["token"] == "new"
