"""Settings: every knob of the gateway, each declared once, on its field.

A field names its GATEWAY_* variable and that variable's reader
(`setting(...)`); its attribute docstring says why it exists. `VARIABLES`
is derived from the fields: nothing else lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from provisioning.clusters import DEFAULT_CLUSTER, ClusterSettings
from provisioning.roles import ClusterRoles
from provisioning.secrets import Secret
from provisioning.tiers import DEFAULT_TIERS, Tier
from proxy.settings import readers
from proxy.settings.errors import SettingsError
from proxy.settings.providers import OIDCProvider
from proxy.settings.values import (
    MAX_COUNT,
    MAX_TOKEN_TTL_SECONDS,
    MIN_TOKEN_TTL_SECONDS,
    YEAR_SECONDS,
    HostPort,
    RateLimit,
)
from proxy.settings.variables import Form, Variable, declared, setting

_TOKEN_TTL = readers.whole(MIN_TOKEN_TTL_SECONDS, MAX_TOKEN_TTL_SECONDS, " (the API server's minimum)", " (a hard limit)")
MAX_BODY_BYTES = 3 * 1024 * 1024
"""Kubernetes itself refuses objects over ~3 MiB (etcd's limit): no variable sets it."""


@dataclass(frozen=True)
class Settings:
    config_file: Path | None = setting(None, env="GATEWAY_CONFIG", read=readers.path, in_config_file=False)
    """A YAML file that may set any of the other variables, under the same
    names; the environment wins over it. None: no file."""
    listen: HostPort = setting(HostPort("127.0.0.1", 8080), env="GATEWAY_LISTEN", read=readers.listen)
    """Where the gateway serves; a host left out (`:8080`) is every interface."""
    metrics_listen: HostPort = setting(HostPort("127.0.0.1", 9091), env="GATEWAY_METRICS_LISTEN", read=readers.listen)
    """`/metrics` has a listener of its own (never the public one, which
    answers 404 there): what tenants' pods can reach of the gateway is the
    public listener, and request counts per route, stream gauges and token
    results are not theirs to read. Loopback by default; a Deployment opens it
    to Prometheus (0.0.0.0) behind a NetworkPolicy. Port 0: any free port."""
    audit_listen: HostPort | None = setting(None, env="GATEWAY_AUDIT_LISTEN", read=readers.listen)
    """Where the API server's audit webhook sends its batches (`POST /audit`,
    proxy.server.audit_listener): a TLS listener of its own that admits only
    clients with a certificate from GATEWAY_AUDIT_CLIENT_CA, so no tenant can
    write events into anyone's timeline. None: no listener, no cluster events."""
    audit_tls_cert_file: Path | None = setting(None, env="GATEWAY_AUDIT_TLS_CERT_FILE", read=readers.path,
                                               form=Form.FILE)
    """The audit listener's serving certificate (the webhook config's
    `certificate-authority-data` must trust it). Required with GATEWAY_AUDIT_LISTEN."""
    audit_tls_key_file: Path | None = setting(None, env="GATEWAY_AUDIT_TLS_KEY_FILE", read=readers.path,
                                              form=Form.FILE)
    """That certificate's key. Required with GATEWAY_AUDIT_LISTEN."""
    audit_client_ca: Path | None = setting(None, env="GATEWAY_AUDIT_CLIENT_CA", read=readers.path, form=Form.FILE)
    """PEM of the CA whose client certificates the audit listener accepts
    (the API server's webhook client certificate). Without one no TLS
    handshake completes. Required with GATEWAY_AUDIT_LISTEN."""
    audit_retention_days: int = setting(30, env="GATEWAY_AUDIT_RETENTION_DAYS", read=readers.whole(1, 3650))
    """Cluster events older than this are deleted (hourly, by every
    replica). A month answers "who deleted that Deployment?" for most
    incidents at metadata level (about 1-2 KB an event); keep the API
    server's own log, or raise this, for longer investigations."""
    database_url: Secret | None = setting(None, env="GATEWAY_DATABASE_URL", read=readers.database_url)
    """None means dev mode: an embedded PostgreSQL under `data_dir`. A Secret
    because URLs carry passwords."""
    data_dir: Path = setting(Path(".gateway"), env="GATEWAY_DATA_DIR", read=readers.path)
    """Dev mode's state: its embedded PostgreSQL, its generated session key
    and the local cluster of `tenant-gateway dev`."""
    kubeconfig: Path | None = setting(None, env="GATEWAY_KUBECONFIG", read=readers.path)
    """The gateway's own restricted credential. None: in-cluster config when
    running in a pod, else ~/.kube/config. One cluster only: with
    GATEWAY_CLUSTERS each cluster names its own."""
    listed_clusters: tuple[ClusterSettings, ...] = setting((), env="GATEWAY_CLUSTERS", read=readers.clusters,
                                                           form=Form.FILE_TEXT)
    """The clusters served (provisioning.clusters says an entry's keys): a
    YAML list in the file GATEWAY_CLUSTERS names, or under `clusters` in the
    GATEWAY_CONFIG file. Empty: one cluster, `default`, from
    GATEWAY_KUBECONFIG, GATEWAY_PUBLIC_SERVER and GATEWAY_PUBLIC_CA_FILE.
    Read it through `clusters`."""
    tls_cert_file: Path | None = setting(None, env="GATEWAY_TLS_CERT_FILE", read=readers.path, form=Form.FILE)
    """Serve HTTPS directly with this certificate; unset behind a
    TLS-terminating ingress. Session cookies are Secure, so browsers need
    HTTPS either way."""
    tls_key_file: Path | None = setting(None, env="GATEWAY_TLS_KEY_FILE", read=readers.path, form=Form.FILE)
    """The certificate's key: the two go together. Both are read only as
    serving starts, so their files must be there at start-up, or serving
    would end in a traceback."""
    public_server: str | None = setting(None, env="GATEWAY_PUBLIC_SERVER", read=readers.https_url)
    """The API server URL written into kubeconfigs. None: that of the
    gateway's own credential."""
    public_ca_file: Path | None = setting(None, env="GATEWAY_PUBLIC_CA_FILE", read=readers.path, form=Form.FILE)
    """The CA written into kubeconfigs. None: that of the gateway's own
    credential. Read into each kubeconfig, so its file must be there at
    start-up, or every download would be a 500."""
    session_secret: Secret | None = setting(None, env="GATEWAY_SESSION_SECRET", read=readers.secret)
    """Signs session tokens. Only dev mode may leave it unset (a random key is
    then kept under data_dir so restarts keep sessions)."""
    cors_origins: tuple[str, ...] = setting((), env="GATEWAY_CORS_ORIGINS", read=readers.origins)
    """Exact origins allowed with credentials ('*' is refused), kept as
    browsers send them."""
    tiers: Mapping[str, Tier] = setting(factory=lambda: dict(DEFAULT_TIERS), env="GATEWAY_TIERS_FILE", read=readers.tiers,
                                        form=Form.FILE_TEXT)
    """Tier name -> quota and limit defaults, from the file
    GATEWAY_TIERS_FILE names; unset, the built-in `basic` tier."""
    shared_images: tuple[str, ...] = setting((), env="GATEWAY_SHARED_IMAGES", read=readers.images)
    """Images every tier's pods may take from the node's cache (added to each
    tier's `sharedImages`): comma-separated images, repositories, or
    prefixes ending in `/`, each naming a registry and a path (a bare
    name would match a registry of that name too; e.g. images an operator
    loads onto the nodes with no registry to pull them from). Any other image must be pulled
    with `imagePullPolicy: Always`, with the tenant's own credentials."""
    tenant_clusterrole: str = setting("tenant-admin", env="GATEWAY_TENANT_CLUSTERROLE", read=readers.object_name)
    """The ClusterRole bound in each tenant namespace."""
    trusted_proxies: frozenset[str] = setting(frozenset(), env="GATEWAY_TRUSTED_PROXIES", read=readers.addresses)
    """Peers whose X-Forwarded-For and X-Forwarded-Proto are believed; any
    other peer is taken for the client itself."""
    token_ttl_seconds: int = setting(MAX_TOKEN_TTL_SECONDS, env="GATEWAY_TOKEN_TTL_SECONDS", read=_TOKEN_TTL)
    """Lifetime of kubeconfig tokens; 7200 s is a hard ceiling of the product."""
    session_ttl_seconds: int = setting(8 * 3600, env="GATEWAY_SESSION_TTL_SECONDS",
                                       read=readers.whole(60, YEAR_SECONDS, high_why=" (a year)"))
    """A working day; logout and suspension end sessions sooner, server-side."""
    registration_enabled: bool = setting(True, env="GATEWAY_REGISTRATION", read=readers.boolean)
    """Self-registration on or off."""
    password_login: bool = setting(True, env="GATEWAY_PASSWORD_LOGIN", read=readers.boolean)
    """False: password register and login are off (SSO-only deployments);
    `user create` still works, for a break-glass administrator."""
    oidc_providers: tuple[OIDCProvider, ...] = setting((), env="GATEWAY_OIDC_PROVIDERS", read=readers.providers,
                                                       form=Form.FILE_TEXT)
    """Identity providers users may sign in with: a YAML list in the file
    GATEWAY_OIDC_PROVIDERS names, or under `oidc_providers` in the
    GATEWAY_CONFIG file."""
    gateway_url: str | None = setting(None, env="GATEWAY_PUBLIC_URL", read=readers.origin)
    """The gateway's public URL, for OIDC redirect URIs, device sign-in links
    and `format=exec` kubeconfigs. `serve` requires it: a link built from a
    request's Host would be one the client chose. Unset (`dev` only): the
    origin the request came to."""
    rate_init: RateLimit = setting(RateLimit(5, 3600), env="GATEWAY_RATE_INIT", read=readers.rate_limit)
    """Onboardings per user and per address. Onboarding makes cluster
    objects: few per user per hour stops namespace exhaustion."""
    rate_login: RateLimit = setting(RateLimit(10, 60), env="GATEWAY_RATE_LOGIN", read=readers.rate_limit)
    """Sign-in attempts per address and per email (password login), and per
    address for SSO starts, SSO callbacks and device starts, each counted
    apart: a person signs in a few times a minute, a guesser far more."""
    rate_register: RateLimit = setting(RateLimit(10, 3600), env="GATEWAY_RATE_REGISTER", read=readers.rate_limit)
    """Registrations per address: each makes an account."""
    rate_kubeconfig: RateLimit = setting(RateLimit(30, 60), env="GATEWAY_RATE_KUBECONFIG", read=readers.rate_limit)
    """Kubeconfig and token issuance per user: each is a TokenRequest and an audit row."""
    credential_spares: int = setting(8, env="GATEWAY_CREDENTIAL_SPARES", read=readers.whole(0, 64))
    """Binding Secrets each workspace keeps made ahead (provisioning.spares),
    so an issuance binds its token to one instead of making one while the
    person waits: within the tier's live credentials, gone ten minutes after
    the workspace's last issuance. 0: every issuance makes its own."""
    max_streams_per_workspace: int = setting(100, env="GATEWAY_MAX_STREAMS_PER_WORKSPACE", read=readers.whole(1, MAX_COUNT))
    """Open proxied streams (watch, logs, exec, attach, port-forward) per workspace, over every replica; one more is 429."""
    stream_buffer_bytes: int = setting(64 * 1024 * 1024, env="GATEWAY_STREAM_BUFFER_BYTES",
                                       read=readers.whole(1024 * 1024, MAX_COUNT))
    """Bytes the open streams of one replica may hold for clients that read
    slower than the API server sends; past it, a stream holding any reads no
    more from the API server until its client has taken them
    (proxy.passthrough.stream_buffers). Size it well under the pod's memory limit."""
    proxy_token_refresh_margin_seconds: int = setting(600, env="GATEWAY_PROXY_TOKEN_REFRESH_SECONDS",
                                                      read=readers.whole(1, MAX_TOKEN_TTL_SECONDS))
    """Renew a cached tenant token when less than this remains (the spec's 10 min)."""
    proxy_token_ttl_seconds: int = setting(3600, env="GATEWAY_PROXY_TOKEN_TTL_SECONDS", read=_TOKEN_TTL)
    """Tokens the proxy caches (never handed out) live an hour: long enough
    to amortise, short enough to age out."""
    session_cache_seconds: float = setting(60.0, env="GATEWAY_SESSION_CACHE_SECONDS", read=readers.seconds)
    """How long a replica trusts a session it has read. Logout, expiry and
    suspension evict it at once, on every replica (events); this is the
    backstop for an event that could not be delivered."""
    workspace_cache_seconds: float = setting(300.0, env="GATEWAY_WORKSPACE_CACHE_SECONDS", read=readers.seconds)
    """The same backstop for workspaces (suspension, resume, a new ServiceAccount)."""
    client_idle_seconds: float = setting(75.0, env="GATEWAY_CLIENT_IDLE_SECONDS", read=readers.seconds)
    """A client's connection without a request in progress is closed after
    this: between requests, and from its opening to its first request's
    head, so a client trickling a head in cannot hold a connection (nginx's
    keep-alive default; aiohttp's own is an hour). A JSON route's body must
    arrive within it too (408)."""
    upstream_connect_timeout_seconds: float = setting(5.0, env="GATEWAY_UPSTREAM_CONNECT_TIMEOUT_SECONDS",
                                                      read=readers.seconds)
    """A TCP and TLS connection to the API server; longer is an outage (503)."""
    upstream_timeout_seconds: float = setting(60.0, env="GATEWAY_UPSTREAM_TIMEOUT_SECONDS", read=readers.seconds)
    """The whole exchange of an ordinary proxied request, body included, and
    the wait for the answer to a WebSocket upgrade. The API server's own
    limit for a request is 60 s; watches, log follows and exec have none."""
    upstream_keepalive_seconds: float = setting(60.0, env="GATEWAY_UPSTREAM_KEEPALIVE_SECONDS", read=readers.seconds)
    """An idle connection to the API server is not reused after this: under
    the API server's own idle timeout (90 s), so the gateway never sends on
    a connection the server is closing."""
    upstream_idle_connections: int = setting(512, env="GATEWAY_UPSTREAM_IDLE_CONNECTIONS", read=readers.whole(0, MAX_COUNT))
    """Idle connections kept to the API server: enough for a burst of
    clients without a TLS handshake each; beyond it they are closed."""
    database_timeout_seconds: float = setting(5.0, env="GATEWAY_DATABASE_TIMEOUT_SECONDS", read=readers.seconds)
    """Any database command: a hung database turns into a 503 before a client gives up."""
    database_pool_size: int = setting(10, env="GATEWAY_DATABASE_POOL_SIZE", read=readers.whole(
        2, MAX_COUNT, why=": a suspension holds one connection and commits on another"))
    """Connections to PostgreSQL per replica: warm proxied requests use none,
    so this serves sign-ins, issuance, onboarding and the opening and closing
    of streams."""
    audit_queue_rows: int = setting(20_000, env="GATEWAY_AUDIT_QUEUE_ROWS", read=readers.whole(1, MAX_COUNT))
    """Proxied writes whose audit rows may be waiting to be stored at once
    (a write takes its place before it is sent). Room for bursts while
    the writer catches up; it is also what a crash of the replica could
    lose, the rows being in memory until written."""
    audit_wait_seconds: float = setting(2.0, env="GATEWAY_AUDIT_WAIT_SECONDS", read=readers.seconds)
    """How long a proxied write waits for room in the audit queue before
    it is refused (503 `audit_unavailable`, never sent): the writer is
    behind, or the database is away."""
    oidc_timeout_seconds: float = setting(15.0, env="GATEWAY_OIDC_TIMEOUT_SECONDS", read=readers.seconds)
    """Any one call to an identity provider (discovery, keys, code exchange):
    they answer in well under a second, and a hung one must not hold a sign-in."""
    oidc_discovery_seconds: float = setting(3600.0, env="GATEWAY_OIDC_DISCOVERY_SECONDS", read=readers.seconds)
    """How long an identity provider's discovery document is kept. Its keys
    are fetched again as soon as a token names one not yet known."""
    shutdown_drain_seconds: float = setting(5.0, env="GATEWAY_SHUTDOWN_DRAIN_SECONDS", read=readers.seconds)
    """After SIGTERM, short requests in flight get this long to finish: a LIST
    or a write answers in well under a second; a few seconds covers a slow one."""
    shutdown_timeout_seconds: float = setting(20.0, env="GATEWAY_SHUTDOWN_TIMEOUT_SECONDS", read=readers.seconds)
    """The whole stop, drain included, ends within this: under the deployment's
    terminationGracePeriodSeconds (30) minus its preStop delay (5), so the
    kubelet never has to SIGKILL what is still in flight."""
    log_level: str = setting("INFO", env="GATEWAY_LOG_LEVEL", read=readers.log_level)
    """The level of the JSON log on stderr."""

    @property
    def dev_mode(self) -> bool:
        return self.database_url is None

    @property
    def session_secret_value(self) -> Secret:
        if self.session_secret is None:
            raise SettingsError("GATEWAY_SESSION_SECRET is not set")
        return self.session_secret

    @property
    def clusters(self) -> tuple[ClusterSettings, ...]:
        """The one place that decides which clusters there are: the list,
        else today's single-cluster settings as one shared cluster named
        `default` (where existing workspaces are)."""
        if self.listed_clusters:
            return self.listed_clusters
        return (ClusterSettings(DEFAULT_CLUSTER, kubeconfig=self.kubeconfig, public_server=self.public_server,
                                public_ca_file=self.public_ca_file),)

    @property
    def cluster_roles(self) -> ClusterRoles:
        """The ClusterRole of each member role: the tenant role for admins,
        `tenant-edit` and `tenant-view` for the others."""
        return ClusterRoles(admin=self.tenant_clusterrole)

    @property
    def max_body_bytes(self) -> int:
        """Not a knob, so not a field: see MAX_BODY_BYTES."""
        return MAX_BODY_BYTES


VARIABLES: tuple[Variable, ...] = tuple(variable for _, variable in declared(Settings))
_BY_FIELD = {field: variable.name for field, variable in declared(Settings)}


def variable_name(field: str) -> str:
    """The GATEWAY_* variable that sets the field named `field`, for messages
    that tell a person what to set."""
    return _BY_FIELD[field]
"""Every variable the gateway reads, one per field: the README's
configuration table is checked against this list (tests/unit/test_settings.py)."""
