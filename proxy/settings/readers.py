"""Pure readers: a variable's name and text in, its value out, or SettingsError.

Each is named on the Settings field it reads (`setting(..., read=...)`).
None touches the disk: a path is only a path here; whether its file is
there is the loading side's check (proxy.settings.loading).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable
from urllib.parse import SplitResult, parse_qsl, urlsplit

import yaml

from provisioning.clusters import ClusterConfigError, ClusterSettings, parse_clusters
from provisioning.secrets import Secret, yaml_mistake
from provisioning.tiers import Tier, parse_tiers
from provisioning.workload_rules import image_entry_problem
from proxy.http.addresses import canonical, is_host
from proxy.settings.errors import SettingsError
from proxy.settings.providers import OIDCProvider, ProviderConfigError, parse_providers
from proxy.settings.values import MAX_COUNT, YEAR_SECONDS, HostPort, RateLimit


def listen(name: str, text: str) -> HostPort:
    host, sep, port = text.rpartition(":")
    # isdigit() alone takes '²', which int() does not.
    if not sep or not (port.isascii() and port.isdigit()) or not 0 <= int(port) < 65536:
        raise SettingsError(f"{name} must be host:port")
    return HostPort(host.strip("[]") or "0.0.0.0", int(port))


def _split(name: str, text: str) -> SplitResult:
    """urlsplit, whose refusals (an unclosed '[' of an IPv6 host) would
    quote the value: said here in words of our own."""
    try:
        return urlsplit(text)
    except ValueError:
        raise SettingsError(f"{name} is not a URL") from None


def _port_text_ok(port: str) -> bool:
    return port.isascii() and port.isdigit() and 0 < int(port) < 65536


def database_url(name: str, text: str) -> Secret:
    """A postgresql:// URL asyncpg can read. Its password, not
    percent-encoded, may hold '/', '#', '?' or '@', which split the URL in
    the wrong place (the rest of the password read as a port, a path or a
    query), and asyncpg's error would quote part of it: refused here in
    words that never quote the URL."""
    parts = _split(name, text)
    if parts.scheme not in ("postgres", "postgresql"):
        raise SettingsError(f"{name} must be a postgresql:// URL")
    problem = _database_url_problem(parts)
    if problem is not None:
        raise SettingsError(f"{name} cannot be read: {problem} (percent-encode any '/', '#', '?', '@' or '%' "
                            "in its user name and password)")
    return Secret(text)


def _database_url_problem(parts: SplitResult) -> str | None:
    """What asyncpg could not read in the URL, in words that quote none of it.
    Its hosts are split as asyncpg splits them: a comma-separated list, each
    `host[:port]` or `[ipv6][:port]`, after the first '@'."""
    if parts.fragment:
        return "a '#' in it"
    userinfo, _, hosts = parts.netloc.rpartition("@")
    if "@" in userinfo:
        return "more than one '@' before the host"
    for host in hosts.split(",") if hosts else ():
        if not host:
            return "an empty host in its list of hosts"
        port = host.partition("]")[2].removeprefix(":") if host.startswith("[") else host.partition(":")[2]
        if port and not _port_text_ok(port):
            return "a port that is not a number from 1 to 65535"
    try:
        query = parse_qsl(parts.query, strict_parsing=True) if parts.query else []
    except ValueError:
        return "a query that is not name=value pairs"
    if any(key == "port" and not all(map(_port_text_ok, value.split(","))) for key, value in query):
        return "a port that is not a number from 1 to 65535"
    return None


def object_name(name: str, text: str) -> str:
    """A Kubernetes object name as the API server takes it in a path (RBAC
    names may hold ':'): a bad one would fail every onboarding instead."""
    if not text or text in (".", "..") or "/" in text or "%" in text or not text.isascii() or not text.isprintable():
        raise SettingsError(f"{name} must be the name of a Kubernetes object")
    return text


def path(name: str, text: str) -> Path:
    return Path(text).expanduser()


def _printable_ascii(name: str, text: str) -> None:
    """URLs end up in kubeconfigs, which take printable ASCII only
    (provisioning.kubeconfig): an IDN host must be given in its xn-- form."""
    if not text.isascii() or not text.isprintable():
        raise SettingsError(f"{name} must be printable ASCII (an international host in its xn-- form)")


def _port(name: str, parts: SplitResult, shape: str) -> int | None:
    """The URL's port, None if it has none; refused unless its host[:port]
    is that alone (no user:password@, a host, a port from 1 to 65535)."""
    try:
        port = parts.port if is_host(parts.netloc) else 0
    except ValueError:  # a port that is not a number, or out of range
        port = 0
    if port == 0:
        raise SettingsError(f"{name} must be {shape}")
    return port


def https_url(name: str, text: str) -> str:
    """An https:// URL of a host, with a path if it must (an API server
    behind a proxy's prefix), and nothing a kubeconfig's `server` cannot
    use: no user:password@, query or fragment."""
    _printable_ascii(name, text)
    parts = _split(name, text)
    shape = "an https:// URL of a host[:port], with no user:password@, query or fragment"
    if parts.scheme != "https" or parts.query or parts.fragment:
        raise SettingsError(f"{name} must be {shape}")
    _port(name, parts, shape)
    return text.rstrip("/")


def origin(name: str, text: str) -> str:
    """scheme://host[:port] and nothing else, written as a browser writes
    an Origin (RFC 6454): scheme and host in lowercase, a default port left
    out. Browsers send it so; one kept as written (`https://UI.example`,
    `https://ui.example:443`) would never match."""
    _printable_ascii(name, text)
    parts = _split(name, text.rstrip("/"))
    shape = "scheme://host[:port] with nothing after"
    if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.fragment:
        raise SettingsError(f"{name} must be {shape}")
    port = _port(name, parts, shape)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def secret(name: str, text: str) -> Secret:
    if len(text) < 32:
        raise SettingsError(f"{name} must be at least 32 characters")
    return Secret(text)


def origins(name: str, text: str) -> tuple[str, ...]:
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    if any("*" in entry for entry in entries):
        raise SettingsError(f"{name} must list exact origins; '*' is refused")
    # Entries by position, not quoted: one written with user:password@ would print the password.
    return tuple(dict.fromkeys(origin(f"{name} (entry {number})", entry)
                               for number, entry in enumerate(entries, 1)))


def images(name: str, text: str) -> tuple[str, ...]:
    """Comma-separated images, repositories or prefixes (provisioning.workload_rules)."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    for entry in entries:
        problem = image_entry_problem(entry)
        if problem:
            raise SettingsError(f"{name}: {problem}")
    return tuple(dict.fromkeys(entries))


def addresses(name: str, text: str) -> frozenset[str]:
    found = set()
    for item in (a.strip() for a in text.split(",") if a.strip()):
        address = canonical(item)
        if address is None:
            raise SettingsError(f"{name} entry {item!r} is not an IP address")
        found.add(address)
    return frozenset(found)


def boolean(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name} must be true or false")


def whole(low: int, high: int, why: str = "", high_why: str = "") -> Callable[[str, str], int]:
    def read(name: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise SettingsError(f"{name} must be a whole number") from None
        if value < low:
            raise SettingsError(f"{name} must be at least {low}{why}")
        if value > high:
            raise SettingsError(f"{name} may not exceed {high}{high_why}")
        return value
    return read


def seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{name} must be a number of seconds") from None
    if not 0 < value <= 86400:
        raise SettingsError(f"{name} must be more than 0 and at most 86400 seconds (a day)")
    return value


def log_level(name: str, text: str) -> str:
    level = text.strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise SettingsError(f"{name} must be DEBUG, INFO, WARNING or ERROR")
    return level


def rate_limit(name: str, text: str) -> RateLimit:
    """COUNT/SECONDS, each bounded: past MAX_COUNT the database cannot count it."""
    try:
        limit, window = (int(part) for part in str(text).split("/", 1))
    except ValueError:
        raise SettingsError(f"{name} must look like COUNT/SECONDS, e.g. 10/60") from None
    if limit < 1 or window < 1:
        raise SettingsError(f"{name} needs a positive count and window")
    if limit > MAX_COUNT or window > YEAR_SECONDS:
        raise SettingsError(f"{name} may count at most {MAX_COUNT} in a window of at most "
                            f"{YEAR_SECONDS} seconds (a year)")
    return RateLimit(limit, window)


def tiers(name: str, text: str) -> dict[str, Tier]:
    """The text of the tiers file (provisioning.tiers says its forms)."""
    try:
        return parse_tiers(text)
    except ValueError as error:
        raise SettingsError(f"{name}: {error}") from None


def clusters(name: str, text: str) -> tuple[ClusterSettings, ...]:
    """The text of a YAML file listing clusters."""
    try:
        loaded: Any = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SettingsError(f"{name} is {yaml_mistake(error)}") from None
    return cluster_list(name, loaded)


def cluster_list(name: str, loaded: Any) -> tuple[ClusterSettings, ...]:
    """The list as YAML loaded it: from the clusters' file, or the config file's `clusters`."""
    try:
        return parse_clusters(loaded)
    except ClusterConfigError as error:
        raise SettingsError(f"{name}: {error}") from None


def providers(name: str, text: str) -> tuple[OIDCProvider, ...]:
    """The text of a YAML file listing identity providers."""
    try:
        loaded: Any = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SettingsError(f"{name} is {yaml_mistake(error)}") from None
    return provider_list(name, loaded)


def provider_list(name: str, loaded: Any) -> tuple[OIDCProvider, ...]:
    """The list as YAML loaded it: from the providers' file, or the config file's `oidc_providers`."""
    try:
        return parse_providers(loaded)
    except ProviderConfigError as error:
        raise SettingsError(f"{name}: {error}") from None
