"""`tenant-gateway credential` from a cached token, loading no more than that needs.

kubectl runs `tenant-gateway credential` before every command, and nearly
always the token is cached. This module answers that case with json,
datetime and os only: argparse (which also pulls in shutil and gettext),
pathlib, urllib and typing were half of the command's start-up. It answers
only the form kubectl's exec plugin runs, `credential --gateway URL
--workspace ID` (the URL already as `https://host[:port]`), from a token
still good, for the cluster the token is for; anything else (no cached
token, an error to report, --help, another spelling of the arguments) gets
None and goes to proxy.cli.client.commands, which handles every case as
before, from the start. The helpers the two share live here.

The token goes only to the workspace's own cluster. kubectl says which
cluster it is about to call in KUBERNETES_EXEC_INFO (`spec.cluster`, given
because the kubeconfig sets `provideClusterInfo: true`); the server and CA
the gateway named when it minted the token are cached with it. A kubeconfig
whose `server:` (or kubectl's --server) points elsewhere, that trusts
another CA, turns TLS verification off, or withholds the cluster gets no
token, cached or fresh: a shared kubeconfig cannot send a user's token to a
server of someone else's choosing.
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
EXEC_INFO = "KUBERNETES_EXEC_INFO"
"""Where kubectl hands its exec plugin the ExecCredential request, cluster included (client-go sets it last,
after the kubeconfig's own `env:`, so a kubeconfig cannot forge it)."""


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


def cached_token(entry: dict[str, Any], workspace: str) -> tuple[str, datetime.datetime, str, str] | None:
    """(token, expiry, server, CA) of a cached token still good; one cached without its cluster
    (by an older version) is not used: it could not be checked."""
    cached = entry.get("tokens", {}).get(workspace)
    if not isinstance(cached, dict) or not isinstance(cached.get("token"), str):
        return None
    expires_at = parse_time(cached.get("expires_at"))
    if expires_at is None or not REFRESH_MARGIN < expires_at - now() <= LONGEST_LIFETIME:
        return None
    server, ca = cached.get("server"), cached.get("ca", "")
    if not isinstance(server, str) or not server or not isinstance(ca, str):
        return None
    return cached["token"], expires_at, server, ca


def printable(text: Any) -> str:
    """`text` without control characters: what others wrote cannot drive the terminal or add a line."""
    return "".join(character for character in str(text) if character.isprintable())


def exec_cluster(text: str | None) -> dict[str, Any] | None:
    """`spec.cluster` of kubectl's KUBERNETES_EXEC_INFO; None if there is none (or it has no server)."""
    try:
        info = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
    spec = info.get("spec") if isinstance(info, dict) else None
    cluster = spec.get("cluster") if isinstance(spec, dict) else None
    return cluster if isinstance(cluster, dict) and isinstance(cluster.get("server"), str) else None


def unsafe_cluster(cluster: dict[str, Any] | None) -> str | None:
    """Why no token may go to this cluster, whichever the workspace's is (checked before anything is minted)."""
    if cluster is None:
        return ("kubectl did not say which cluster it is about to call (KUBERNETES_EXEC_INFO): the kubeconfig "
                "must set provideClusterInfo: true; download the workspace's kubeconfig again (format=exec)")
    if cluster.get("insecure-skip-tls-verify") is True:
        return (f"the kubeconfig turns TLS verification off for {printable(cluster['server'])}: "
                "no token goes to a server that is not verified")
    return None


def other_cluster(cluster: dict[str, Any], server: str, ca: str, workspace: str) -> str | None:
    """Why `cluster` (kubectl's) is not the workspace's, `server` with `ca` as the gateway named them. Pure."""
    if _server_key(cluster["server"]) != _server_key(server):
        return (f"refusing to hand workspace {printable(workspace)}'s token to {printable(cluster['server'])}: "
                f"its cluster is {printable(server)} (if the gateway moved it, run `tenant-gateway login` again)")
    theirs = _ca_bytes(cluster.get("certificate-authority-data") or "")
    if theirs is None or theirs != _ca_bytes(ca):
        return (f"refusing to hand workspace {printable(workspace)}'s token to {printable(server)} through a "
                "kubeconfig that trusts another certificate authority; download the workspace's kubeconfig again")
    return None


def _server_key(url: str) -> str:
    """A server URL as compared: scheme and host in lowercase, no default port, no trailing slash."""
    scheme, separator, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    authority = authority.lower()
    if scheme.lower() == "https" and authority.endswith(":443"):
        authority = authority[:-4]
    return f"{scheme.lower()}{separator}{authority}{slash}{path}".rstrip("/")


def _ca_bytes(data: Any) -> bytes | None:
    """The CA bundle that base64 `data` encodes (whitespace aside); None if it is not base64."""
    import binascii

    if not isinstance(data, str):
        return None
    try:
        return binascii.a2b_base64(data.encode())
    except (binascii.Error, UnicodeEncodeError):
        return None


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
        cluster = exec_cluster(os.environ.get(EXEC_INFO))
        if (found is None or cluster is None or unsafe_cluster(cluster)
                or other_cluster(cluster, found[2], found[3], workspace)):
            return None  # proxy.cli.client.commands mints, or refuses in one line
        print(exec_credential(found[0], found[1]))
        return 0
    except KeyboardInterrupt:
        return 130
