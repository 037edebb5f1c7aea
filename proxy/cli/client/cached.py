"""`tenant-gateway credential` from a cached token, loading no more than that needs.

kubectl runs `tenant-gateway credential` before every command, and nearly
always the token is cached. This module answers that case with json,
datetime and os only: argparse (which also pulls in shutil and gettext),
pathlib, urllib and typing were half of the command's start-up. It answers
only the form kubectl's exec plugin runs, `credential --gateway URL
--workspace ID` (the URL already as `https://host[:port]`), from a token
still good; anything else (no cached token, an error to report, --help,
another spelling of the arguments) gets None and goes to
proxy.cli.client.commands, which handles every case as before, from the start.
The helpers the two share live here.
"""

from __future__ import annotations

import datetime
import json
import os

TYPE_CHECKING = False  # typing itself is not loaded at run time
if TYPE_CHECKING:
    from typing import Any, Mapping, Sequence

REFRESH_MARGIN = datetime.timedelta(minutes=10)
"""A cached token is used until this long before it expires (kubectl may run a long command with it)."""
LONGEST_LIFETIME = datetime.timedelta(hours=2, minutes=5)
"""No token is used or cached past this from now, whatever expiry the gateway gives: the contract's 2 hours,
and 5 minutes of clock skew (a clock further behind makes a fresh token look longer-lived)."""
_ORIGIN_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:")


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def parse_time(text: Any) -> datetime.datetime | None:
    try:
        parsed = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def exec_credential(token: str, expires_at: datetime.datetime) -> str:
    return json.dumps({
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
        "status": {"token": token, "expirationTimestamp": expires_at.astimezone(datetime.timezone.utc)
                   .strftime("%Y-%m-%dT%H:%M:%SZ")},
    })


def cached_token(entry: dict[str, Any], workspace: str) -> tuple[str, datetime.datetime] | None:
    cached = entry.get("tokens", {}).get(workspace)
    if not isinstance(cached, dict) or not isinstance(cached.get("token"), str):
        return None
    expires_at = parse_time(cached.get("expires_at"))
    if expires_at is None or not REFRESH_MARGIN < expires_at - now() <= LONGEST_LIFETIME:
        return None
    return cached["token"], expires_at


def credentials_file(env: Mapping[str, str] | None = None) -> str:
    """$XDG_CONFIG_HOME/tenant-gateway/credentials.json (proxy.cli.client.store.credentials_path as a string)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", os.path.expanduser("~")), ".config")
    return os.path.join(base, "tenant-gateway", "credentials.json")


def directory_problem(directory: str) -> str | None:
    """Why the credentials' directory is not safe to use (None if it is, or is not there yet)."""
    try:
        status = os.stat(directory)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot use {directory}: {error.strerror}"
    if status.st_uid != os.geteuid():
        return f"{directory} belongs to another user; remove it, or make it yours (chown) and 0700"
    if status.st_mode & 0o022:
        return f"{directory} is writable by group or others; fix it with `chmod 700 {directory}`"
    return None


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The credentials file's document; {} if it is missing, unreadable, a link or not a JSON object."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW)) as file:
            loaded = json.loads(file.read())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _plain_origin(url: str) -> bool:
    """`https://host[:port]` exactly: what proxy.cli.client.commands would normalise to itself."""
    scheme, separator, rest = url.partition("://")
    return scheme == "https" and bool(separator) and bool(rest) and set(rest) <= _ORIGIN_CHARACTERS


def answer(argv: Sequence[str]) -> int | None:
    """`credential`'s arguments -> exit status if answered here from the cache, None to take the full path."""
    try:
        if len(argv) != 4:
            return None
        options = {argv[0]: argv[1], argv[2]: argv[3]}
        if options.keys() != {"--gateway", "--workspace"}:
            return None
        gateway, workspace = options["--gateway"], options["--workspace"]
        if not _plain_origin(gateway) or workspace.startswith("-"):
            return None
        path = credentials_file()
        if directory_problem(os.path.dirname(path)):
            return None  # proxy.cli.client.commands says what is wrong
        gateways = read(path).get("gateways")
        entry = gateways.get(gateway) if isinstance(gateways, dict) else None
        if (not isinstance(entry, dict) or not isinstance(entry.get("session"), str)
                or not isinstance(entry.get("tokens", {}), dict)):
            return None
        found = cached_token(entry, workspace)
        if found is None:
            return None
        print(exec_credential(*found))
        return 0
    except KeyboardInterrupt:
        return 130
