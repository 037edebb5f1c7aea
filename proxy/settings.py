"""The gateway's configuration: one frozen object, built once at start-up.

`load_settings` is pure (environment mapping + optional YAML text in, Settings
out) so every validation rule is unit-tested without touching the disk.
`settings_from_environment` is the I/O shell that reads the files it names.
Environment variables win over the YAML file given by GATEWAY_CONFIG, which
uses the same key names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

import yaml

from provisioning.secrets import Secret
from provisioning.tiers import DEFAULT_TIERS, Tier, parse_tiers
from proxy.addresses import canonical
from proxy.auth.oidc_providers import OIDCProvider, ProviderConfigError, parse_providers

MAX_TOKEN_TTL_SECONDS = 7200
# The API server refuses TokenRequests shorter than this (422).
MIN_TOKEN_TTL_SECONDS = 600


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
    rate_register: RateLimit = RateLimit(10, 3600)
    rate_kubeconfig: RateLimit = RateLimit(30, 60)
    """Kubeconfig and token issuance per user: each is a TokenRequest and an audit row."""
    max_streams_per_workspace: int = 100
    """Open proxied streams (watch, logs, exec, attach, port-forward) per workspace; one more is 429."""
    proxy_token_refresh_margin_seconds: int = 600
    """Renew a cached tenant token when less than this remains (the spec's 10 min)."""
    proxy_token_ttl_seconds: int = 3600
    """Tokens the proxy caches live an hour: long enough to amortise, short enough to age out."""
    max_body_bytes: int = 3 * 1024 * 1024
    """Kubernetes itself refuses objects over ~3 MiB (etcd's limit)."""
    shutdown_drain_seconds: float = 5.0
    """After SIGTERM, short requests in flight get this long to finish: a LIST
    or a write answers in well under a second; a few seconds covers a slow one."""
    shutdown_timeout_seconds: float = 20.0
    """The whole stop, drain included, ends within this: under the deployment's
    terminationGracePeriodSeconds (30) minus its preStop delay (5), so the
    kubelet never has to SIGKILL what is still in flight."""

    @property
    def dev_mode(self) -> bool:
        return self.database_url is None

    @property
    def session_secret_value(self) -> Secret:
        if self.session_secret is None:
            raise SettingsError("GATEWAY_SESSION_SECRET is not set")
        return self.session_secret


_KEYS = (
    "GATEWAY_LISTEN", "GATEWAY_METRICS_LISTEN", "GATEWAY_DATABASE_URL", "GATEWAY_DATA_DIR", "GATEWAY_KUBECONFIG",
    "GATEWAY_PUBLIC_SERVER", "GATEWAY_PUBLIC_CA_FILE", "GATEWAY_SESSION_SECRET",
    "GATEWAY_CORS_ORIGINS", "GATEWAY_TIERS_FILE", "GATEWAY_TENANT_CLUSTERROLE",
    "GATEWAY_TRUSTED_PROXIES", "GATEWAY_TOKEN_TTL_SECONDS", "GATEWAY_SESSION_TTL_SECONDS",
    "GATEWAY_REGISTRATION", "GATEWAY_RATE_INIT", "GATEWAY_RATE_LOGIN", "GATEWAY_RATE_REGISTER",
    "GATEWAY_RATE_KUBECONFIG", "GATEWAY_MAX_STREAMS_PER_WORKSPACE",
    "GATEWAY_TLS_CERT_FILE", "GATEWAY_TLS_KEY_FILE",
    "GATEWAY_SHUTDOWN_DRAIN_SECONDS", "GATEWAY_SHUTDOWN_TIMEOUT_SECONDS",
    "GATEWAY_PASSWORD_LOGIN", "GATEWAY_OIDC_PROVIDERS", "GATEWAY_PUBLIC_URL",
)
# Structured (a list), so not a GATEWAY_* string: only the GATEWAY_CONFIG file holds it.
_PROVIDERS_KEY = "oidc_providers"


def _config_mapping(config_text: str | None) -> dict[str, Any]:
    if not config_text:
        return {}
    loaded: Any = yaml.safe_load(config_text) or {}
    if not isinstance(loaded, dict):
        raise SettingsError("GATEWAY_CONFIG must be a YAML mapping of GATEWAY_* keys")
    return loaded


def _merge(env: Mapping[str, str], config_text: str | None) -> dict[str, str]:
    merged: dict[str, str] = {}
    loaded = {k: v for k, v in _config_mapping(config_text).items() if k != _PROVIDERS_KEY}
    if loaded:
        unknown = sorted(set(map(str, loaded)) - set(_KEYS))
        if unknown:
            raise SettingsError(f"unknown keys in GATEWAY_CONFIG: {', '.join(unknown)}")
        merged.update({str(k): ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in loaded.items() if v is not None})
    merged.update({k: v for k, v in env.items() if k in _KEYS and v != ""})
    return merged


def _listen(text: str, name: str = "GATEWAY_LISTEN") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise SettingsError(f"{name} must be host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def _origins(text: str) -> tuple[str, ...]:
    origins = tuple(o.strip() for o in text.split(",") if o.strip())
    for origin in origins:
        if "*" in origin:
            raise SettingsError("GATEWAY_CORS_ORIGINS must list exact origins; '*' is refused")
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
            raise SettingsError(f"CORS origin {origin!r} must be scheme://host[:port] with nothing after")
    return origins


def _addresses(text: str) -> frozenset[str]:
    found = set()
    for item in (a.strip() for a in text.split(",") if a.strip()):
        address = canonical(item)
        if address is None:
            raise SettingsError(f"GATEWAY_TRUSTED_PROXIES entry {item!r} is not an IP address")
        found.add(address)
    return frozenset(found)


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name} must be true or false")


def _providers(config_text: str | None, providers_text: str | None) -> tuple[OIDCProvider, ...]:
    """GATEWAY_OIDC_PROVIDERS's file wins over the GATEWAY_CONFIG file's list."""
    try:
        if providers_text is not None:
            return parse_providers(yaml.safe_load(providers_text))
        return parse_providers(_config_mapping(config_text).get(_PROVIDERS_KEY))
    except (ProviderConfigError, yaml.YAMLError) as error:
        raise SettingsError(f"GATEWAY_OIDC_PROVIDERS: {error}") from None


def load_settings(env: Mapping[str, str], config_text: str | None = None,
                  tiers_text: str | None = None, providers_text: str | None = None) -> Settings:
    """Build and validate Settings. `tiers_text` is the content of GATEWAY_TIERS_FILE,
    `providers_text` that of GATEWAY_OIDC_PROVIDERS."""
    values = _merge(env, config_text)
    kwargs: dict[str, Any] = {"oidc_providers": _providers(config_text, providers_text)}
    if "GATEWAY_PUBLIC_URL" in values:
        url = values["GATEWAY_PUBLIC_URL"].rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
            raise SettingsError("GATEWAY_PUBLIC_URL must be scheme://host[:port] with nothing after")
        kwargs["gateway_url"] = url
    if "GATEWAY_LISTEN" in values:
        kwargs["listen_host"], kwargs["listen_port"] = _listen(values["GATEWAY_LISTEN"])
    if "GATEWAY_METRICS_LISTEN" in values:
        kwargs["metrics_host"], kwargs["metrics_port"] = _listen(values["GATEWAY_METRICS_LISTEN"], "GATEWAY_METRICS_LISTEN")
    if "GATEWAY_DATABASE_URL" in values:
        url = values["GATEWAY_DATABASE_URL"]
        if urlsplit(url).scheme not in ("postgres", "postgresql"):
            raise SettingsError("GATEWAY_DATABASE_URL must be a postgresql:// URL")
        kwargs["database_url"] = Secret(url)
    for key, name in (("GATEWAY_DATA_DIR", "data_dir"), ("GATEWAY_KUBECONFIG", "kubeconfig"),
                      ("GATEWAY_PUBLIC_CA_FILE", "public_ca_file"), ("GATEWAY_TLS_CERT_FILE", "tls_cert_file"),
                      ("GATEWAY_TLS_KEY_FILE", "tls_key_file")):
        if key in values:
            kwargs[name] = Path(values[key]).expanduser()
    if ("tls_cert_file" in kwargs) != ("tls_key_file" in kwargs):
        raise SettingsError("GATEWAY_TLS_CERT_FILE and GATEWAY_TLS_KEY_FILE go together")
    if "GATEWAY_PUBLIC_SERVER" in values:
        server = values["GATEWAY_PUBLIC_SERVER"].rstrip("/")
        if urlsplit(server).scheme != "https":
            raise SettingsError("GATEWAY_PUBLIC_SERVER must be an https:// URL")
        kwargs["public_server"] = server
    if "GATEWAY_SESSION_SECRET" in values:
        secret = values["GATEWAY_SESSION_SECRET"]
        if len(secret) < 32:
            raise SettingsError("GATEWAY_SESSION_SECRET must be at least 32 characters")
        kwargs["session_secret"] = Secret(secret)
    elif "GATEWAY_DATABASE_URL" in values:
        raise SettingsError("GATEWAY_SESSION_SECRET is required outside dev mode")
    if "GATEWAY_CORS_ORIGINS" in values:
        kwargs["cors_origins"] = _origins(values["GATEWAY_CORS_ORIGINS"])
    if tiers_text is not None:
        try:
            kwargs["tiers"] = parse_tiers(tiers_text)
        except ValueError as error:
            raise SettingsError(f"GATEWAY_TIERS_FILE: {error}") from None
    if "GATEWAY_TENANT_CLUSTERROLE" in values:
        kwargs["tenant_clusterrole"] = values["GATEWAY_TENANT_CLUSTERROLE"]
    if "GATEWAY_TRUSTED_PROXIES" in values:
        kwargs["trusted_proxies"] = _addresses(values["GATEWAY_TRUSTED_PROXIES"])
    for key, name in (("GATEWAY_TOKEN_TTL_SECONDS", "token_ttl_seconds"),
                      ("GATEWAY_SESSION_TTL_SECONDS", "session_ttl_seconds"),
                      ("GATEWAY_MAX_STREAMS_PER_WORKSPACE", "max_streams_per_workspace")):
        if key in values:
            try:
                kwargs[name] = int(values[key])
            except ValueError:
                raise SettingsError(f"{key} must be a whole number") from None
    if kwargs.get("max_streams_per_workspace", 1) < 1:
        raise SettingsError("GATEWAY_MAX_STREAMS_PER_WORKSPACE must be at least 1")
    ttl = kwargs.get("token_ttl_seconds", MAX_TOKEN_TTL_SECONDS)
    if ttl > MAX_TOKEN_TTL_SECONDS:
        raise SettingsError(f"GATEWAY_TOKEN_TTL_SECONDS may not exceed {MAX_TOKEN_TTL_SECONDS} (a hard limit)")
    if ttl < MIN_TOKEN_TTL_SECONDS:
        raise SettingsError(f"GATEWAY_TOKEN_TTL_SECONDS must be at least {MIN_TOKEN_TTL_SECONDS} (the API server's minimum)")
    if kwargs.get("session_ttl_seconds", 60) < 60:
        raise SettingsError("GATEWAY_SESSION_TTL_SECONDS must be at least 60")
    if "GATEWAY_REGISTRATION" in values:
        kwargs["registration_enabled"] = _bool("GATEWAY_REGISTRATION", values["GATEWAY_REGISTRATION"])
    if "GATEWAY_PASSWORD_LOGIN" in values:
        kwargs["password_login"] = _bool("GATEWAY_PASSWORD_LOGIN", values["GATEWAY_PASSWORD_LOGIN"])
    for key, name in (("GATEWAY_RATE_INIT", "rate_init"), ("GATEWAY_RATE_LOGIN", "rate_login"),
                      ("GATEWAY_RATE_REGISTER", "rate_register"), ("GATEWAY_RATE_KUBECONFIG", "rate_kubeconfig")):
        if key in values:
            kwargs[name] = RateLimit.parse(key, values[key])
    kwargs.update(_shutdown(values))
    settings = Settings(**kwargs)
    if settings.metrics_port == settings.listen_port != 0:
        raise SettingsError("GATEWAY_METRICS_LISTEN needs a port of its own: /metrics is never served on GATEWAY_LISTEN")
    return settings


def _seconds(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{key} must be a number of seconds") from None
    if not 0 < value < 3600:
        raise SettingsError(f"{key} must be more than 0 and less than 3600 seconds")
    return value


def _shutdown(values: Mapping[str, str]) -> dict[str, float]:
    """The drain must leave time to close the database and write queued audit rows."""
    found = {name: _seconds(key, values[key]) for key, name in (
        ("GATEWAY_SHUTDOWN_DRAIN_SECONDS", "shutdown_drain_seconds"),
        ("GATEWAY_SHUTDOWN_TIMEOUT_SECONDS", "shutdown_timeout_seconds")) if key in values}
    drain = found.get("shutdown_drain_seconds", Settings.shutdown_drain_seconds)
    total = found.get("shutdown_timeout_seconds", Settings.shutdown_timeout_seconds)
    if drain + 1 > total:
        raise SettingsError("GATEWAY_SHUTDOWN_TIMEOUT_SECONDS must exceed GATEWAY_SHUTDOWN_DRAIN_SECONDS "
                            "by at least 1 s (the rest of the stop needs it)")
    return found


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
