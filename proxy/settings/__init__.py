"""The gateway's configuration: one frozen object, built once at start-up.

Every GATEWAY_* variable is declared once, in `VARIABLES`: its name, the
fields it sets, how its text is read and validated, and why it exists; the
README's configuration table is checked against that list. `load_settings`
is pure (environment mapping + optional YAML text in, Settings out) so every
validation rule is unit-tested without touching the disk.
`settings_from_environment` is the I/O shell that reads the files it names.
Environment variables win over the YAML file given by GATEWAY_CONFIG, which
uses the same key names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import SplitResult, parse_qsl, urlsplit

import yaml

from provisioning.secrets import Secret, yaml_mistake
from provisioning.tiers import DEFAULT_TIERS, Tier, parse_tiers
from proxy.addresses import canonical, is_host
from proxy.settings.providers import OIDCProvider, ProviderConfigError, parse_providers

MAX_TOKEN_TTL_SECONDS = 7200
# The API server refuses TokenRequests shorter than this (422).
MIN_TOKEN_TTL_SECONDS = 600
YEAR_SECONDS = 365 * 86400
"""The longest window or lifetime the gateway takes: a longer one is a
typo, and past what date arithmetic and the database's intervals hold."""
MAX_COUNT = 1_000_000_000
"""The largest count any setting takes (a rate limit's, streams,
connections): within the `integer` the database counts hits in
(2**31 - 1), and beyond any real need."""


class SettingsError(ValueError):
    """Configuration that must stop the gateway from starting."""


@dataclass(frozen=True)
class RateLimit:
    """`limit` events per `window_seconds`, per key."""

    limit: int
    window_seconds: int

    @classmethod
    def parse(cls, name: str, text: str) -> "RateLimit":
        try:
            limit, window = (int(part) for part in str(text).split("/", 1))
        except ValueError:
            raise SettingsError(f"{name} must look like COUNT/SECONDS, e.g. 10/60") from None
        if limit < 1 or window < 1:
            raise SettingsError(f"{name} needs a positive count and window")
        if limit > MAX_COUNT or window > YEAR_SECONDS:
            raise SettingsError(f"{name} may count at most {MAX_COUNT} in a window of at most "
                                f"{YEAR_SECONDS} seconds (a year)")
        return cls(limit, window)


@dataclass(frozen=True)
class Settings:
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9091
    """`/metrics` has a listener of its own (never the public one, which
    answers 404 there): what tenants' pods can reach of the gateway is the
    public listener, and request counts per route, stream gauges and token
    results are not theirs to read. Loopback by default; a Deployment opens it
    to Prometheus (0.0.0.0) behind a NetworkPolicy. Port 0: any free port."""
    database_url: Secret | None = None
    """None means dev mode: an embedded PostgreSQL under `data_dir`. A Secret
    because URLs carry passwords."""
    data_dir: Path = Path(".gateway")
    kubeconfig: Path | None = None
    """None: in-cluster config when running in a pod, else ~/.kube/config."""
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    """Serve HTTPS directly; unset behind a TLS-terminating ingress. Session
    cookies are Secure, so browsers need HTTPS either way."""
    public_server: str | None = None
    public_ca_file: Path | None = None
    session_secret: Secret | None = None
    """Signs session tokens. Only dev mode may leave it unset (a random key is
    then kept under data_dir so restarts keep sessions)."""
    cors_origins: tuple[str, ...] = ()
    tiers: Mapping[str, Tier] = field(default_factory=lambda: dict(DEFAULT_TIERS))
    tenant_clusterrole: str = "tenant-admin"
    trusted_proxies: frozenset[str] = frozenset()
    token_ttl_seconds: int = MAX_TOKEN_TTL_SECONDS
    """Lifetime of kubeconfig tokens; 7200 s is a hard ceiling of the product."""
    session_ttl_seconds: int = 8 * 3600
    """A working day; logout and suspension end sessions sooner, server-side."""
    registration_enabled: bool = True
    password_login: bool = True
    """False: password register and login are off (SSO-only deployments);
    `user create` still works, for a break-glass administrator."""
    oidc_providers: tuple[OIDCProvider, ...] = ()
    """Identity providers users may sign in with (GATEWAY_OIDC_PROVIDERS, or
    `oidc_providers` in the GATEWAY_CONFIG file)."""
    gateway_url: str | None = None
    """The gateway's public URL (GATEWAY_PUBLIC_URL), written into `format=exec`
    kubeconfigs and device sign-in links; unset: the origin the request came to."""
    rate_init: RateLimit = RateLimit(5, 3600)
    """Onboarding makes cluster objects: few per user per hour stops namespace exhaustion."""
    rate_login: RateLimit = RateLimit(10, 60)
    """Sign-in attempts per address and per email (password login), and per
    address for SSO starts, SSO callbacks and device starts, each counted
    apart: a person signs in a few times a minute, a guesser far more."""
    rate_register: RateLimit = RateLimit(10, 3600)
    rate_kubeconfig: RateLimit = RateLimit(30, 60)
    """Kubeconfig and token issuance per user: each is a TokenRequest and an audit row."""
    max_streams_per_workspace: int = 100
    """Open proxied streams (watch, logs, exec, attach, port-forward) per workspace, over every replica; one more is 429."""
    proxy_token_refresh_margin_seconds: int = 600
    """Renew a cached tenant token when less than this remains (the spec's 10 min)."""
    proxy_token_ttl_seconds: int = 3600
    """Tokens the proxy caches live an hour: long enough to amortise, short enough to age out."""
    session_cache_seconds: float = 60.0
    """How long a replica trusts a session it has read. Logout, expiry and
    suspension evict it at once, on every replica (events); this is the
    backstop for an event that could not be delivered."""
    workspace_cache_seconds: float = 300.0
    """The same backstop for workspaces (suspension, resume, a new ServiceAccount)."""
    client_idle_seconds: float = 75.0
    """A client's connection without a request in progress is closed after
    this: between requests, and from its opening to its first request's
    head, so a client trickling a head in cannot hold a connection (nginx's
    keep-alive default; aiohttp's own is an hour). A JSON route's body must
    arrive within it too (408)."""
    upstream_connect_timeout_seconds: float = 5.0
    """A TCP and TLS connection to the API server; longer is an outage (503)."""
    upstream_timeout_seconds: float = 60.0
    """The whole exchange of an ordinary proxied request, body included, and
    the wait for the answer to a WebSocket upgrade. The API server's own
    limit for a request is 60 s; watches, log follows and exec have none."""
    upstream_keepalive_seconds: float = 60.0
    """An idle connection to the API server is not reused after this: under
    the API server's own idle timeout (90 s), so the gateway never sends on
    a connection the server is closing."""
    upstream_idle_connections: int = 512
    """Idle connections kept to the API server: enough for a burst of
    clients without a TLS handshake each; beyond it they are closed."""
    database_timeout_seconds: float = 5.0
    """Any database command: a hung database turns into a 503 before a client gives up."""
    database_pool_size: int = 10
    """Connections to PostgreSQL per replica: warm proxied requests use none,
    so this serves sign-ins, issuance, onboarding and the opening and closing
    of streams."""
    oidc_timeout_seconds: float = 15.0
    """Any one call to an identity provider (discovery, keys, code exchange):
    they answer in well under a second, and a hung one must not hold a sign-in."""
    oidc_discovery_seconds: float = 3600.0
    """How long an identity provider's discovery document is kept. Its keys
    are fetched again as soon as a token names one not yet known."""
    max_body_bytes: int = 3 * 1024 * 1024
    """Kubernetes itself refuses objects over ~3 MiB (etcd's limit)."""
    shutdown_drain_seconds: float = 5.0
    """After SIGTERM, short requests in flight get this long to finish: a LIST
    or a write answers in well under a second; a few seconds covers a slow one."""
    shutdown_timeout_seconds: float = 20.0
    """The whole stop, drain included, ends within this: under the deployment's
    terminationGracePeriodSeconds (30) minus its preStop delay (5), so the
    kubelet never has to SIGKILL what is still in flight."""
    log_level: str = "INFO"

    @property
    def dev_mode(self) -> bool:
        return self.database_url is None

    @property
    def session_secret_value(self) -> Secret:
        if self.session_secret is None:
            raise SettingsError("GATEWAY_SESSION_SECRET is not set")
        return self.session_secret


def _config_mapping(config_text: str | None) -> dict[str, Any]:
    if not config_text:
        return {}
    try:
        loaded: Any = yaml.safe_load(config_text) or {}
    except yaml.YAMLError as error:
        raise SettingsError(f"GATEWAY_CONFIG is {yaml_mistake(error)}") from None
    if not isinstance(loaded, dict):
        raise SettingsError("GATEWAY_CONFIG must be a YAML mapping of GATEWAY_* keys")
    return loaded


def _merge(env: Mapping[str, str], config_text: str | None) -> dict[str, str]:
    merged: dict[str, str] = {}
    loaded = {k: v for k, v in _config_mapping(config_text).items() if k != _PROVIDERS_KEY}
    if loaded:
        unknown = sorted(set(map(str, loaded)) - set(_FILE_KEYS))
        if unknown:
            raise SettingsError(f"unknown keys in GATEWAY_CONFIG: {', '.join(unknown)}")
        merged.update({str(k): _config_text(v) for k, v in loaded.items()})
    _refuse_empty({k: v for k, v in env.items() if k in _NAMES})
    _refuse_empty(merged)
    merged.update({k: v for k, v in env.items() if k in _FILE_KEYS})
    return merged


def _config_text(value: Any) -> str:
    """A GATEWAY_CONFIG value as the environment would spell it: a list
    comma-separated, nothing (`KEY:`, YAML's null) as empty."""
    if value is None:
        return ""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _refuse_empty(values: Mapping[str, str]) -> None:
    """A variable set to nothing is a mistake (a template's missing value),
    never a way to ask for its default: an empty GATEWAY_DATABASE_URL would
    start dev mode with a generated session key, an empty GATEWAY_KUBECONFIG
    use ~/.kube/config, an empty GATEWAY_REGISTRATION turn registration on.
    Unset, each keeps its default."""
    empty = sorted(name for name, text in values.items() if not text.strip())
    if empty:
        raise SettingsError(f"{', '.join(empty)} {'is' if len(empty) == 1 else 'are'} set but empty: "
                            "give a value, or leave it out for its default")


# -- how each variable's text is read: (name, text) -> a value, or SettingsError --

def _listen(name: str, text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    # isdigit() alone takes '²', which int() does not.
    if not sep or not (port.isascii() and port.isdigit()) or not 0 <= int(port) < 65536:
        raise SettingsError(f"{name} must be host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def _split(name: str, text: str) -> SplitResult:
    """urlsplit, whose refusals (an unclosed '[' of an IPv6 host) would
    quote the value: said here in words of our own."""
    try:
        return urlsplit(text)
    except ValueError:
        raise SettingsError(f"{name} is not a URL") from None


def _port_text_ok(port: str) -> bool:
    return port.isascii() and port.isdigit() and 0 < int(port) < 65536


def _database_url(name: str, text: str) -> Secret:
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


def _file(name: str, text: str) -> Path:
    """A file read only when it is needed (the CA, into each kubeconfig; the
    TLS certificate and key, as serving starts): missing, it would be a 500
    on every download or a traceback then, so it must be there at start-up."""
    path = _path(name, text)
    if not path.is_file():
        raise SettingsError(f"{name}: {path} is not a file")
    return path


def _object_name(name: str, text: str) -> str:
    """A Kubernetes object name as the API server takes it in a path (RBAC
    names may hold ':'): a bad one would fail every onboarding instead."""
    if not text or text in (".", "..") or "/" in text or "%" in text or not text.isascii() or not text.isprintable():
        raise SettingsError(f"{name} must be the name of a Kubernetes object")
    return text


def _path(name: str, text: str) -> Path:
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


def _https_url(name: str, text: str) -> str:
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


def _origin(name: str, text: str) -> str:
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


def _secret(name: str, text: str) -> Secret:
    if len(text) < 32:
        raise SettingsError(f"{name} must be at least 32 characters")
    return Secret(text)


def _origins(name: str, text: str) -> tuple[str, ...]:
    origins = [o.strip() for o in text.split(",") if o.strip()]
    if any("*" in origin for origin in origins):
        raise SettingsError(f"{name} must list exact origins; '*' is refused")
    # Entries by position, not quoted: one written with user:password@ would print the password.
    return tuple(dict.fromkeys(_origin(f"{name} (entry {number})", origin)
                               for number, origin in enumerate(origins, 1)))


def _addresses(name: str, text: str) -> frozenset[str]:
    found = set()
    for item in (a.strip() for a in text.split(",") if a.strip()):
        address = canonical(item)
        if address is None:
            raise SettingsError(f"{name} entry {item!r} is not an IP address")
        found.add(address)
    return frozenset(found)


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name} must be true or false")


def _whole(low: int, high: int, why: str = "", high_why: str = "") -> Callable[[str, str], int]:
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


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{name} must be a number of seconds") from None
    if not 0 < value <= 86400:
        raise SettingsError(f"{name} must be more than 0 and at most 86400 seconds (a day)")
    return value


def _log_level(name: str, text: str) -> str:
    level = text.strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise SettingsError(f"{name} must be DEBUG, INFO, WARNING or ERROR")
    return level


@dataclass(frozen=True)
class Variable:
    """One GATEWAY_* variable: the Settings fields it sets, and how its text is read."""

    name: str
    fields: tuple[str, ...]
    """Settings fields it sets (two for host:port); none for the files read
    before the rest (`settings_from_environment`)."""
    read: Callable[[str, str], Any] | None
    why: str
    in_config_file: bool = True


def _one(name: str, field_name: str, read: Callable[[str, str], Any], why: str) -> Variable:
    return Variable(name, (field_name,), read, why)


def _files(name: str, why: str, *, in_config_file: bool = True) -> Variable:
    return Variable(name, (), None, why, in_config_file)


VARIABLES: tuple[Variable, ...] = (
    Variable("GATEWAY_LISTEN", ("listen_host", "listen_port"), _listen, "where the gateway serves"),
    Variable("GATEWAY_METRICS_LISTEN", ("metrics_host", "metrics_port"), _listen,
             "/metrics on a listener of its own, never the public one"),
    _one("GATEWAY_DATABASE_URL", "database_url", _database_url, "unset: dev mode, an embedded PostgreSQL"),
    _one("GATEWAY_DATA_DIR", "data_dir", _path, "dev mode's state"),
    _one("GATEWAY_KUBECONFIG", "kubeconfig", _path, "the gateway's own restricted credential"),
    _one("GATEWAY_PUBLIC_SERVER", "public_server", _https_url, "the API server URL written into kubeconfigs"),
    _one("GATEWAY_PUBLIC_CA_FILE", "public_ca_file", _file, "the CA written into kubeconfigs"),
    _one("GATEWAY_SESSION_SECRET", "session_secret", _secret, "signs session tokens"),
    _one("GATEWAY_CORS_ORIGINS", "cors_origins", _origins, "exact origins allowed with credentials"),
    _files("GATEWAY_TIERS_FILE", "tier name -> quota and limit defaults"),
    _one("GATEWAY_TENANT_CLUSTERROLE", "tenant_clusterrole", _object_name,
         "the ClusterRole bound in each tenant namespace"),
    _one("GATEWAY_TRUSTED_PROXIES", "trusted_proxies", _addresses, "peers whose X-Forwarded-* are believed"),
    _one("GATEWAY_TOKEN_TTL_SECONDS", "token_ttl_seconds",
         _whole(MIN_TOKEN_TTL_SECONDS, MAX_TOKEN_TTL_SECONDS, " (the API server's minimum)", " (a hard limit)"),
         "kubeconfig token lifetime; 7200 s is the product's ceiling"),
    _one("GATEWAY_SESSION_TTL_SECONDS", "session_ttl_seconds", _whole(60, YEAR_SECONDS, high_why=" (a year)"),
         "session lifetime"),
    _one("GATEWAY_REGISTRATION", "registration_enabled", _bool, "self-registration on or off"),
    _one("GATEWAY_PASSWORD_LOGIN", "password_login", _bool, "off: SSO only"),
    _files("GATEWAY_OIDC_PROVIDERS", "a YAML list of identity providers"),
    _one("GATEWAY_PUBLIC_URL", "gateway_url", _origin, "for OIDC redirects, device links, exec kubeconfigs"),
    _one("GATEWAY_RATE_INIT", "rate_init", RateLimit.parse, "onboardings per user and address"),
    _one("GATEWAY_RATE_LOGIN", "rate_login", RateLimit.parse,
         "sign-ins per email and address (password, SSO start and callback, device)"),
    _one("GATEWAY_RATE_REGISTER", "rate_register", RateLimit.parse, "registrations per address"),
    _one("GATEWAY_RATE_KUBECONFIG", "rate_kubeconfig", RateLimit.parse, "kubeconfig and token issuances per user"),
    _one("GATEWAY_MAX_STREAMS_PER_WORKSPACE", "max_streams_per_workspace", _whole(1, MAX_COUNT),
         "open streams per workspace"),
    _one("GATEWAY_TLS_CERT_FILE", "tls_cert_file", _file, "serve HTTPS directly"),
    _one("GATEWAY_TLS_KEY_FILE", "tls_key_file", _file, "serve HTTPS directly"),
    _one("GATEWAY_LOG_LEVEL", "log_level", _log_level, "the JSON log's level"),
    _one("GATEWAY_SHUTDOWN_DRAIN_SECONDS", "shutdown_drain_seconds", _seconds, "how long requests may finish after SIGTERM"),
    _one("GATEWAY_SHUTDOWN_TIMEOUT_SECONDS", "shutdown_timeout_seconds", _seconds, "the whole stop's bound"),
    # Runtime knobs: timeouts, cache lifetimes and pool sizes, each with its why on its Settings field.
    _one("GATEWAY_PROXY_TOKEN_TTL_SECONDS", "proxy_token_ttl_seconds",
         _whole(MIN_TOKEN_TTL_SECONDS, MAX_TOKEN_TTL_SECONDS, " (the API server's minimum)", " (a hard limit)"),
         "lifetime of the tenant tokens the proxy caches"),
    _one("GATEWAY_PROXY_TOKEN_REFRESH_SECONDS", "proxy_token_refresh_margin_seconds",
         _whole(1, MAX_TOKEN_TTL_SECONDS),
         "renew a cached tenant token with less than this left"),
    _one("GATEWAY_SESSION_CACHE_SECONDS", "session_cache_seconds", _seconds,
         "how long a session read is trusted if an event is lost"),
    _one("GATEWAY_WORKSPACE_CACHE_SECONDS", "workspace_cache_seconds", _seconds,
         "how long a workspace read is trusted if an event is lost"),
    _one("GATEWAY_CLIENT_IDLE_SECONDS", "client_idle_seconds", _seconds,
         "a client's connection without a request in progress is closed after this (a JSON body: 408)"),
    _one("GATEWAY_UPSTREAM_CONNECT_TIMEOUT_SECONDS", "upstream_connect_timeout_seconds", _seconds,
         "connecting to the API server"),
    _one("GATEWAY_UPSTREAM_TIMEOUT_SECONDS", "upstream_timeout_seconds", _seconds,
         "an ordinary proxied request's whole exchange"),
    _one("GATEWAY_UPSTREAM_KEEPALIVE_SECONDS", "upstream_keepalive_seconds", _seconds,
         "an idle connection to the API server is not reused after this"),
    _one("GATEWAY_UPSTREAM_IDLE_CONNECTIONS", "upstream_idle_connections", _whole(0, MAX_COUNT),
         "idle connections kept to the API server"),
    _one("GATEWAY_DATABASE_TIMEOUT_SECONDS", "database_timeout_seconds", _seconds, "any database command"),
    _one("GATEWAY_DATABASE_POOL_SIZE", "database_pool_size",
         _whole(2, MAX_COUNT, why=": a suspension holds one connection and commits on another"),
         "connections to PostgreSQL per replica"),
    _one("GATEWAY_OIDC_TIMEOUT_SECONDS", "oidc_timeout_seconds", _seconds, "any one call to an identity provider"),
    _one("GATEWAY_OIDC_DISCOVERY_SECONDS", "oidc_discovery_seconds", _seconds,
         "how long a provider's discovery document is kept"),
    _files("GATEWAY_CONFIG", "a YAML file of the other variables", in_config_file=False),
)
"""Every variable the gateway reads, declared once: the README's
configuration table is checked against this list (tests/unit/test_settings.py)."""

_NAMES = frozenset(variable.name for variable in VARIABLES)
_FILE_KEYS = frozenset(variable.name for variable in VARIABLES if variable.in_config_file)
# Structured (a list), so not a GATEWAY_* string: only the GATEWAY_CONFIG file holds it.
_PROVIDERS_KEY = "oidc_providers"


def _providers(config_text: str | None, providers_text: str | None) -> tuple[OIDCProvider, ...]:
    """GATEWAY_OIDC_PROVIDERS's file wins over the GATEWAY_CONFIG file's list."""
    try:
        if providers_text is not None:
            return parse_providers(yaml.safe_load(providers_text))
        return parse_providers(_config_mapping(config_text).get(_PROVIDERS_KEY))
    except yaml.YAMLError as error:
        raise SettingsError(f"GATEWAY_OIDC_PROVIDERS is {yaml_mistake(error)}") from None
    except ProviderConfigError as error:
        raise SettingsError(f"GATEWAY_OIDC_PROVIDERS: {error}") from None


def load_settings(env: Mapping[str, str], config_text: str | None = None,
                  tiers_text: str | None = None, providers_text: str | None = None) -> Settings:
    """Build and validate Settings. `tiers_text` is the content of GATEWAY_TIERS_FILE,
    `providers_text` that of GATEWAY_OIDC_PROVIDERS."""
    values = _merge(env, config_text)
    fields: dict[str, Any] = {"oidc_providers": _providers(config_text, providers_text)}
    for variable in VARIABLES:
        if variable.read is not None and variable.name in values:
            value = variable.read(variable.name, values[variable.name])
            fields.update(zip(variable.fields, value) if len(variable.fields) > 1 else {variable.fields[0]: value})
    if tiers_text is not None:
        try:
            fields["tiers"] = parse_tiers(tiers_text)
        except ValueError as error:
            raise SettingsError(f"GATEWAY_TIERS_FILE: {error}") from None
    settings = Settings(**fields)
    _check_together(settings)
    return settings


def _check_together(settings: Settings) -> None:
    """The rules that span variables."""
    if (settings.tls_cert_file is None) != (settings.tls_key_file is None):
        raise SettingsError("GATEWAY_TLS_CERT_FILE and GATEWAY_TLS_KEY_FILE go together")
    if settings.database_url is not None and settings.session_secret is None:
        raise SettingsError("GATEWAY_SESSION_SECRET is required outside dev mode")
    if settings.shutdown_drain_seconds + 1 > settings.shutdown_timeout_seconds:
        # The rest of the stop closes the database and writes queued audit rows.
        raise SettingsError("GATEWAY_SHUTDOWN_TIMEOUT_SECONDS must exceed GATEWAY_SHUTDOWN_DRAIN_SECONDS "
                            "by at least 1 s (the rest of the stop needs it)")
    if settings.proxy_token_refresh_margin_seconds >= settings.proxy_token_ttl_seconds:
        raise SettingsError("GATEWAY_PROXY_TOKEN_REFRESH_SECONDS must be less than GATEWAY_PROXY_TOKEN_TTL_SECONDS")
    if settings.metrics_port == settings.listen_port != 0:
        raise SettingsError("GATEWAY_METRICS_LISTEN needs a port of its own: /metrics is never served on GATEWAY_LISTEN")


def settings_from_environment(env: Mapping[str, str] | None = None) -> Settings:
    """Read the files GATEWAY_CONFIG and GATEWAY_TIERS_FILE name, then validate."""
    env = os.environ if env is None else env

    def read(key: str, path: str | None) -> str | None:
        if not path:
            return None
        try:
            return Path(path).expanduser().read_text()
        except OSError as error:
            raise SettingsError(f"{key}: cannot read {path}: {error.strerror}") from None

    config_text = read("GATEWAY_CONFIG", env.get("GATEWAY_CONFIG"))
    merged = _merge(env, config_text)
    settings = load_settings(env, config_text, read("GATEWAY_TIERS_FILE", merged.get("GATEWAY_TIERS_FILE")),
                             read("GATEWAY_OIDC_PROVIDERS", merged.get("GATEWAY_OIDC_PROVIDERS")))
    return with_secret_files(settings)


def with_secret_files(settings: Settings) -> Settings:
    """Read each provider's `client_secret_file` (the I/O half of the providers' parsing)."""
    providers = []
    for provider in settings.oidc_providers:
        if provider.client_secret is None and provider.client_secret_file is not None:
            try:
                text = provider.client_secret_file.read_text().strip()
            except OSError as error:
                raise SettingsError(f"OIDC provider {provider.name!r}: cannot read client_secret_file: "
                                    f"{error.strerror}") from None
            if not text:
                raise SettingsError(f"OIDC provider {provider.name!r}: client_secret_file is empty")
            provider = replace(provider, client_secret=Secret(text))
        providers.append(provider)
    return replace(settings, oidc_providers=tuple(providers))
