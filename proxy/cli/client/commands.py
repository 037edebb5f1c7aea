"""`tenant-gateway login | credential | logout` (standard library only; see the package docstring).

ssl, urllib.request and webbrowser are imported where they are used: a
cached token is answered without them (they are two thirds of the start-up).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import ssl

from proxy.cli.client import cached, store
from proxy.cli.client.cached import LONGEST_LIFETIME, cached_token, exec_credential, now, parse_time, printable

_TIMEOUT = 30
"""Seconds for one whole exchange with the gateway, connection to last byte (not per read)."""
_REVOKE_TIMEOUT = 5
"""Seconds login gives the gateway to end the session it replaces (best effort)."""
_MAX_ANSWER_BYTES = 1 << 20  # the largest answer read (a token answer is a few KiB)
# Bounds on what the gateway's device sign-in answer may ask of the command
# line: a hostile or broken answer must not make it poll in a tight loop or
# sleep for ever.
_MAX_INTERVAL = 60
_MAX_EXPIRES_IN = 3600


class CommandError(Exception):
    """Ends the command with one clear line and exit status 1."""


def _gateway(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. "https://[::1": an unclosed IPv6 bracket
        parts = urllib.parse.SplitResult("", "", "", "", "")
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise CommandError(f"--gateway must be the gateway's URL, e.g. https://gateway.example (got {url!r})")
    if parts.scheme == "http" and not _loopback(parts.hostname or ""):
        raise CommandError(f"--gateway {url} is plain http: the session would cross the network unencrypted; "
                           "use https (plain http is only for this machine: localhost, 127.0.0.0/8, [::1])")
    return f"{parts.scheme}://{parts.netloc}"


def _loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _context(ca_file: str | None) -> "ssl.SSLContext":
    import ssl

    try:
        return ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    except (OSError, TypeError, ValueError) as error:  # gone, not a path, not a bundle (ssl.SSLError: an OSError)
        raise CommandError(f"cannot use the CA bundle {ca_file!r}: {getattr(error, 'strerror', None) or error}; "
                           "run `tenant-gateway login` with a valid --ca-file") from None


def _no_redirect_handler() -> type:
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # not followed: the 3xx comes back as an HTTPError

    return NoRedirect


def _read_capped(answer: Any) -> bytes:
    """At most _MAX_ANSWER_BYTES + 1 bytes; IncompleteRead if fewer came than Content-Length promised."""
    import http.client

    raw: bytes = answer.read(_MAX_ANSWER_BYTES + 1)
    declared = answer.headers.get("Content-Length", "")
    if len(raw) <= _MAX_ANSWER_BYTES and declared.isdigit() and int(declared) > len(raw):
        raise http.client.IncompleteRead(raw, int(declared) - len(raw))
    return raw


def _call(gateway: str, method: str, path: str, *, ca_file: str | None, body: dict[str, Any] | None = None,
          token: str | None = None, timeout: float | None = None) -> tuple[int, Any]:
    import http.client
    import threading
    import urllib.error
    import urllib.request

    timeout = timeout or _TIMEOUT

    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(gateway + path, data=data, method=method, headers=headers)
    # No redirect is followed: urllib would send the Authorization header
    # (the session) on to wherever it points, even from https to http.
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=_context(ca_file)),
                                         _no_redirect_handler())
    outcome: list[tuple[int, bytes] | BaseException] = []

    def exchange() -> None:
        try:
            try:
                with opener.open(request, timeout=timeout) as answer:
                    outcome.append((answer.status, _read_capped(answer)))
            except urllib.error.HTTPError as error:
                with error:
                    outcome.append((error.code, _read_capped(error)))
        except BaseException as error:
            outcome.append(error)

    # The socket timeout bounds each read, not the exchange: a gateway that
    # sends a byte every few seconds would hold kubectl for ever. The thread
    # is abandoned at the deadline (a daemon: it cannot keep the command alive).
    worker = threading.Thread(target=exchange, daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise CommandError(f"the gateway at {gateway} did not answer within {timeout} s")
    result = outcome[0]
    if isinstance(result, (urllib.error.URLError, OSError)):
        reason = getattr(result, "reason", result)
        raise CommandError(f"cannot reach the gateway at {gateway}: {reason}")
    if isinstance(result, http.client.HTTPException):
        # An answer cut short (IncompleteRead) or not HTTP at all: not an
        # OSError, and the contract promises one line, not a traceback.
        raise CommandError(f"the gateway at {gateway} sent a broken answer ({type(result).__name__})")
    if isinstance(result, BaseException):
        raise result
    status, raw = result
    if len(raw) > _MAX_ANSWER_BYTES:
        raise CommandError(f"the gateway at {gateway} sent an answer larger than 1 MiB")
    if 300 <= status < 400:
        raise CommandError(f"the gateway at {gateway} answered {status} (a redirect); refusing to follow it: "
                           "is --gateway the gateway's own URL?")
    try:
        return status, json.loads(raw) if raw else None
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser's stack
        return status, None


def _seconds(answer: dict[str, Any], name: str, default: int, maximum: int) -> int:
    """A whole number of seconds from the gateway's answer, within [1, maximum]."""
    value = answer.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CommandError(f"device sign-in could not start: the gateway's answer has no valid {name}")
    return min(maximum, max(1, int(value)))


def _error_code(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code", "")) if isinstance(error, dict) else ""


def _error_text(status: int, body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return f"{message} ({status})" if message else f"the gateway answered {status}"


def _sign_in_link(gateway: str, started: dict[str, Any]) -> str:
    """The device answer's link, printed and handed to a browser only if it is on the gateway's own origin.

    So never another scheme (file:, a desktop's URL handlers), another site, or an argument for the
    browser's command line (every accepted link starts with http:// or https://).
    """
    for name in ("verification_uri_complete", "verification_uri"):
        link = started.get(name)
        if isinstance(link, str) and _same_origin(link, gateway):
            return link
    raise CommandError(f"device sign-in could not start: the gateway's sign-in link is not on the gateway ({gateway}); "
                       "is --gateway its public URL?")


def _same_origin(link: str, gateway: str) -> bool:
    # Printable ASCII without blanks or backslashes (which browsers, unlike urlsplit, read as "/").
    if not (link.isascii() and link.isprintable()) or " " in link or "\\" in link:
        return False
    default_ports = {"http": 80, "https": 443}
    try:
        theirs, ours = urllib.parse.urlsplit(link), urllib.parse.urlsplit(gateway)
        return (link.startswith(f"{ours.scheme}://") and theirs.scheme == ours.scheme
                and "@" not in theirs.netloc and theirs.hostname == ours.hostname
                and (theirs.port or default_ports[theirs.scheme]) == (ours.port or default_ports[ours.scheme]))
    except ValueError:  # a port out of range or not a number
        return False


def _client_name() -> str:
    """How this command line names itself to the person approving it: at most 100 printable characters."""
    import socket

    return printable(f"tenant-gateway CLI on {socket.gethostname()}")[:100]


def cmd_login(args: argparse.Namespace) -> int:
    gateway = _gateway(args.gateway)
    ca_file = str(Path(args.ca_file).resolve()) if args.ca_file else None
    store.prepare(store.credentials_path())  # a directory it cannot use is refused before sign-in, not after
    # The name the approval page shows (as this client's own claim) beside the address and time.
    body = {"client_name": _client_name(), **({"provider": args.provider} if args.provider else {})}
    status, started = _call(gateway, "POST", "/api/v1/auth/device", ca_file=ca_file, body=body)
    if status != 200 or not isinstance(started, dict):
        raise CommandError(f"device sign-in could not start: {_error_text(status, started)}")
    interval = _seconds(started, "interval", 5, _MAX_INTERVAL)
    deadline = time.monotonic() + _seconds(started, "expires_in", 600, _MAX_EXPIRES_IN)
    link = _sign_in_link(gateway, started)
    print(f"To sign in, open {link}\nand approve the code {printable(started.get('user_code'))}", file=sys.stderr,
          flush=True)
    if not args.no_browser:
        import webbrowser

        try:
            webbrowser.open(link)
        except webbrowser.Error:
            pass
    while time.monotonic() < deadline:
        time.sleep(interval if not args.poll_interval else args.poll_interval)
        status, answer = _call(gateway, "POST", "/api/v1/auth/device/token", ca_file=ca_file,
                               body={"device_code": started.get("device_code")})
        if status == 200 and isinstance(answer, dict) and isinstance(answer.get("token"), str):
            path = store.credentials_path()
            with store.locked(path):
                document = store.read(path)
                replaced = _gateways(document).get(gateway)
                _gateways(document)[gateway] = {
                    "session": answer["token"], "expires_at": answer.get("expires_at"), "ca_file": ca_file,
                    "tokens": {}}
                store.write(path, document)
            print(f"Signed in to {gateway}.", file=sys.stderr)
            _revoke(gateway, replaced)
            return 0
        code = _error_code(answer)
        if code == "slow_down":
            interval += 5
        elif code != "authorization_pending":
            raise CommandError(f"sign-in failed: {_error_text(status, answer)}")
    raise CommandError("sign-in was not approved in time; run `tenant-gateway login` again")


def _gateways(document: dict[str, Any]) -> dict[str, Any]:
    """The file's entry per gateway; a hand-edited "gateways" that is not an object reads as none."""
    if not isinstance(document.get("gateways"), dict):
        document["gateways"] = {}
    gateways: dict[str, Any] = document["gateways"]
    return gateways


def _revoke(gateway: str, replaced: Any) -> None:
    """End the session a login replaced (it would stay valid for hours), briefly and at best effort.

    After the new one is stored, so that no kubectl is left without a session meanwhile.
    A bearer session needs no CSRF token (the contract's logout route)."""
    if isinstance(replaced, dict) and isinstance(replaced.get("session"), str):
        try:
            _call(gateway, "POST", "/api/v1/auth/logout", ca_file=replaced.get("ca_file"), token=replaced["session"],
                  timeout=_REVOKE_TIMEOUT)
        except CommandError:
            pass


def _entry(document: dict[str, Any], gateway: str) -> dict[str, Any]:
    entry = _gateways(document).get(gateway)
    if not isinstance(entry, dict) or not isinstance(entry.get("session"), str):
        raise CommandError(f"not signed in to {gateway}; run `tenant-gateway login --gateway {gateway}`")
    if not isinstance(entry.get("tokens"), dict):
        entry["tokens"] = {}  # a cache: what is not one is forgotten
    return entry


def cmd_credential(args: argparse.Namespace) -> int:
    """A token for kubectl, only for the cluster it is about to call: the workspace's (see proxy.cli.client.cached).

    A fresh token is cached with the server and CA the gateway named, even
    when kubectl's cluster turns out to be another: the next call is refused
    from the cache, without minting again."""
    gateway, workspace = _gateway(args.gateway), str(args.workspace)
    path = store.credentials_path()
    entry = _entry(store.read(path), gateway)
    cluster = cached.exec_cluster(os.environ.get(cached.EXEC_INFO))
    problem = cached.unsafe_cluster(cluster)
    if cluster is None or problem:
        raise CommandError(problem)
    found = cached_token(entry, workspace)  # no lock, no network
    if found is None:
        with store.locked(path):
            document = store.read(path)
            entry = _entry(document, gateway)
            found = cached_token(entry, workspace)  # another kubectl may have minted while we waited
            if found is None:
                found = _mint(gateway, workspace, entry)
                token, expires_at, server, ca = found
                entry["tokens"][workspace] = {"token": token, "expires_at": expires_at.isoformat(),
                                              "server": server, "ca": ca}
                store.write(path, document)
    problem = cached.other_cluster(cluster, found[2], found[3], workspace)
    if problem:
        raise CommandError(problem)
    print(exec_credential(found[0], found[1]))
    return 0


def _mint(gateway: str, workspace: str, entry: dict[str, Any]) -> tuple[str, datetime.datetime, str, str]:
    query = urllib.parse.urlencode({"workspace_id": workspace})
    status, body = _call(gateway, "GET", f"/api/v1/workspaces/credentials/token?{query}",
                         ca_file=entry.get("ca_file"), token=entry["session"])
    if status == 401:
        raise CommandError(f"the session at {gateway} has ended; run `tenant-gateway login --gateway {gateway}`")
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("token"), str):
        raise CommandError(f"no token for workspace {workspace}: {_error_text(status, body)}")
    expires_at = parse_time(body.get("expires_at"))
    if expires_at is None or expires_at <= now():
        raise CommandError("the gateway's answer had no valid expiry (the tokens it mints last 2 hours at most)")
    server, ca = body.get("server"), body.get("certificate_authority_data") or ""
    if not isinstance(server, str) or not server or not isinstance(ca, str):
        raise CommandError("the gateway's answer did not name the workspace's cluster (server)")
    # Later than a token can live: this machine's clock is behind (or the
    # answer exaggerates). Used until the longest lifetime from now, by
    # this clock, which is before the token really expires either way.
    return body["token"], min(expires_at, now() + LONGEST_LIFETIME), server, ca


def cmd_logout(args: argparse.Namespace) -> int:
    gateway = _gateway(args.gateway)
    path = store.credentials_path()
    with store.locked(path):
        document = store.read(path)
        entry = _gateways(document).pop(gateway, None)
        store.write(path, document)  # forgotten here whatever the gateway says
    if not isinstance(entry, dict) or not isinstance(entry.get("session"), str):
        print(f"not signed in to {gateway}", file=sys.stderr)
        return 0
    status, body = _call(gateway, "POST", "/api/v1/auth/logout", ca_file=entry.get("ca_file"), token=entry["session"])
    if status not in (204, 401):
        raise CommandError(f"forgot the session here, but the gateway did not end it: {_error_text(status, body)}")
    print(f"Signed out of {gateway}.", file=sys.stderr)
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tenant-gateway")
    sub = root.add_subparsers(dest="command", required=True)
    login = sub.add_parser("login", help="sign in from the command line (device sign-in)")
    login.add_argument("--gateway", required=True)
    login.add_argument("--provider", help="sign in through this identity provider")
    login.add_argument("--no-browser", action="store_true", help="never try to open a browser")
    login.add_argument("--ca-file", help="CA bundle that signed the gateway's certificate")
    login.add_argument("--poll-interval", type=float, default=0, help=argparse.SUPPRESS)
    credential = sub.add_parser("credential", help="print a kubectl ExecCredential (kubectl's exec plugin)")
    credential.add_argument("--gateway", required=True)
    credential.add_argument("--workspace", required=True)
    logout = sub.add_parser("logout", help="end the stored session and forget it")
    logout.add_argument("--gateway", required=True)
    return root


COMMANDS = {"login": cmd_login, "credential": cmd_credential, "logout": cmd_logout}


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    try:
        return COMMANDS[args.command](args)
    except (CommandError, store.StoreError) as error:
        print(f"tenant-gateway: {printable(error)}", file=sys.stderr)  # it may quote the gateway's answer
        return 1
    except KeyboardInterrupt:
        return 130
