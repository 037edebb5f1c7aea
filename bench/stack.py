"""Everything a benchmark run needs, started side by side on loopback: the
local control plane, an embedded PostgreSQL, the gateway as its own process
(so its CPU, memory and descriptors can be read from /proc), `kubectl proxy`,
the bare aiohttp relay (bench/floor_relay.py), the compiled reference relays
(bench/references), and one tenant whose ServiceAccount every target uses."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import yaml

from devstack import pki
from devstack.cluster import LocalCluster, start_local_cluster
from devstack.nodeparts import LOCAL_IMAGES
from devstack.processes import free_port
from provisioning.db.pool import start_embedded_postgres

PASSWORD = "benchmark passphrase 1"



NGINX = Path("/usr/sbin/nginx")
"""Where Debian's nginx-light puts it (`make bench` installs it when missing)."""


def find_nginx() -> str | None:
    """nginx on PATH, or where Debian puts it (/usr/sbin is not on every PATH)."""
    return shutil.which("nginx") or (str(NGINX) if NGINX.exists() else None)


def start_nginx(directory: Path, http_block: str, binary: str) -> subprocess.Popen[bytes]:
    """One nginx worker in the foreground, everything it writes in `directory`."""
    (directory / "nginx.conf").write_text(f"""
daemon off;
master_process off;
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  client_body_temp_path {directory};
  proxy_temp_path {directory};
{http_block}
}}
""")
    return subprocess.Popen([binary, "-c", str(directory / "nginx.conf"), "-e", str(directory / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for_port(port: int, what: str, tries: int = 100) -> None:
    for _ in range(tries):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not start")


def raise_fd_limit() -> int:
    """Thousands of watches need thousands of descriptors in every process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    return wanted


@dataclass
class Tenant:
    workspace_id: str
    namespace: str
    session_token: str
    sa_token: str
    user_id: str = ""
    """The owner's user id."""


@dataclass
class Reference:
    """A relay the gateway is read against: where to send requests, and its
    process, whose CPU per request is read from /proc."""

    url: str
    headers: dict[str, str]
    ca_file: str | None
    process: subprocess.Popen[bytes]


REFERENCES_SOURCE = Path(__file__).with_name("references")
# ConfigMaps of 1 MiB: the stalled-readers row sends each watch 24 of 512 KiB
# (the shipped basic tier caps them at 64 KiB, which its admission enforces).
BENCH_TIERS = ('basic: {hard: {requests.cpu: "4", limits.memory: 8Gi, configmaps: "100000"}, '
               'objectBytes: {configMap: 1Mi}, liveCredentials: 10000}\n')


@dataclass
class Stack:
    root: Path
    cluster: LocalCluster | None = None
    gateway: subprocess.Popen[bytes] | None = None
    kubectl_proxy: subprocess.Popen[bytes] | None = None
    floor_relay: subprocess.Popen[bytes] | None = None
    gateway_url: str = ""
    metrics_urls: dict[str, str] = field(default_factory=dict)
    """Each launched gateway's metrics listener (GATEWAY_METRICS_LISTEN), by name."""
    proxy_url: str = ""
    floor_url: str = ""
    ca_file: Path = Path()
    tls_files: tuple[Path, Path] = (Path(), Path())
    """The gateway's serving certificate and key (the floor relay serves with them too)."""
    database_url: str = ""
    session_secret: str = field(default_factory=lambda: uuid.uuid4().hex * 2)
    references: dict[str, Reference] = field(default_factory=dict)
    missing_references: dict[str, str] = field(default_factory=dict)
    """Reference relays that could not be started here, and why."""
    cluster_start_seconds: float = 0.0
    """Time to a ready control plane with cached binaries (the foundation's < 30 s)."""

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        raise_fd_limit()
        began = time.monotonic()
        self.cluster = start_local_cluster(self.root / "cluster")
        self.cluster_start_seconds = time.monotonic() - began
        self.database_url = start_embedded_postgres(self.root / "pg")
        tls = self.root / "tls"
        tls.mkdir()
        ca, ca_key = pki.make_ca("bench-ca")
        ca.write(tls, "ca")
        cert, key = pki.issue(ca, ca_key, common_name="gateway", server_hosts=("127.0.0.1", "localhost")).write(tls, "gateway")
        self.ca_file = tls / "ca.crt"
        self.tls_files = (cert, key)
        # The runs hold hundreds of ConfigMaps in one tenant namespace (LIST
        # sizes, watch delivery): more than the built-in basic tier allows.
        (self.root / "tiers.yaml").write_text(BENCH_TIERS)
        self.gateway_url, self.gateway = self.launch_gateway("gateway")
        self.wait_ready(self.gateway_url, self.gateway, "gateway")

    def launch_gateway(self, name: str, *, source: Path | None = None, wrapper: tuple[str, ...] = (),
                       port: int | None = None,
                       extra_env: dict[str, str] | None = None) -> tuple[str, subprocess.Popen[bytes]]:
        """A gateway process on this stack's database and cluster, sharing its
        session key (so one tenant's session works on all of them); from
        another source tree, under a wrapper such as valgrind, on a given
        port (a replica restarted behind a balancer), or with more settings
        (`extra_env`, e.g. GATEWAY_OIDC_PROVIDERS), if asked."""
        cert, key = self.tls_files
        port, metrics_port = port or free_port(), free_port()
        self.metrics_urls[name] = f"http://127.0.0.1:{metrics_port}"
        env = {
            **self.settings_env(),
            "GATEWAY_LISTEN": f"127.0.0.1:{port}", "GATEWAY_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            "GATEWAY_PUBLIC_URL": f"https://127.0.0.1:{port}",
            "GATEWAY_TLS_CERT_FILE": str(cert), "GATEWAY_TLS_KEY_FILE": str(key),
            "GATEWAY_RATE_INIT": "100000/60", "GATEWAY_RATE_LOGIN": "100000/60", "GATEWAY_RATE_REGISTER": "100000/60",
            # The workloads measure thousands of streams and issuances in one workspace.
            "GATEWAY_RATE_KUBECONFIG": "1000000/60", "GATEWAY_MAX_STREAMS_PER_WORKSPACE": "100000",
            "GATEWAY_LOG_LEVEL": "WARNING",
            "PYTHONMALLOC": "malloc",  # as the image runs it (Dockerfile)
            **(extra_env or {}),
        }
        if "GATEWAY_CLUSTERS" in env:  # a cluster list replaces the single cluster's kubeconfig (both is an error)
            del env["GATEWAY_KUBECONFIG"]
        if source is not None:
            env["PYTHONPATH"] = str(source)  # ahead of the editable install of the working tree
        # proxy.cli:main is the console script's entry now and was the server's
        # own before, so older revisions (bench.instructions REV) start too.
        command = [*wrapper, sys.executable, "-c", "from proxy.cli import main; main()", "serve"]
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, cwd=self.root,
                                   stderr=open(self.root / f"{name}.log", "wb"))
        return f"https://127.0.0.1:{port}", process

    def settings_env(self) -> dict[str, str]:
        """This environment and the settings every gateway command of this
        stack shares: its database, cluster, tiers and session key."""
        assert self.cluster is not None
        return {**os.environ, "GATEWAY_DATABASE_URL": self.database_url,
                "GATEWAY_TIERS_FILE": str(self.root / "tiers.yaml"), "GATEWAY_SESSION_SECRET": self.session_secret,
                "GATEWAY_KUBECONFIG": str(self.cluster.gateway_kubeconfig), "GATEWAY_SHARED_IMAGES": LOCAL_IMAGES}

    def run_cli(self, *arguments: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
        """`tenant-gateway <arguments>` (e.g. `reconcile`) against this stack, to its end."""
        return subprocess.run([sys.executable, "-c", "from proxy.cli import main; main()", *arguments],
                              env=self.settings_env(), cwd=self.root, capture_output=True, text=True, timeout=timeout)

    def start_kubectl_proxy(self, tenant: Tenant) -> None:
        assert self.cluster is not None
        config = self.root / "tenant.kubeconfig"
        config.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": self.cluster.server, "certificate-authority": str(self.cluster.ca_file)}}],
            "users": [{"name": "u", "user": {"token": tenant.sa_token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": tenant.namespace}}],
            "current-context": "c",
        }))
        port = free_port()
        self.kubectl_proxy = subprocess.Popen(
            [str(self.cluster.kubectl), f"--kubeconfig={config}", "proxy", f"--port={port}", "--address=127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.proxy_url = f"http://127.0.0.1:{port}"
        wait_for_port(port, "kubectl proxy")

    def start_floor_relay(self, tenant: Tenant, *, wrapper: tuple[str, ...] = ()) -> None:
        """The bare aiohttp relay, under a wrapper such as valgrind if asked."""
        assert self.cluster is not None
        port = free_port()
        cert, key = self.tls_files
        env = {**os.environ, "FLOOR_PORT": str(port), "FLOOR_UPSTREAM": self.cluster.server,
               "FLOOR_UPSTREAM_CA": str(self.cluster.ca_file), "FLOOR_TOKEN": tenant.sa_token,
               "FLOOR_TLS_CERT": str(cert), "FLOOR_TLS_KEY": str(key)}
        self.floor_relay = subprocess.Popen([*wrapper, sys.executable, "-m", "bench.floor_relay"], env=env,
                                            stdout=subprocess.DEVNULL, stderr=open(self.root / "floor.log", "wb"))
        self.floor_url = f"https://127.0.0.1:{port}"
        wait_for_port(port, "the floor relay", tries=3000 if wrapper else 100)

    def start_references(self, tenant: Tenant) -> None:
        """Go's reverse proxy and nginx (TLS on both legs, the tenant's token
        attached, like the floor relay) and a plain TCP hop. nginx is used
        when installed (`make bench` installs Debian's nginx-light when
        missing); the others need only Go, which
        the local control plane's build needs anyway."""
        assert self.cluster is not None
        cert, key = (str(path) for path in self.tls_files)
        binary = self.root / "relay"
        build = subprocess.run(["go", "build", "-trimpath", "-o", str(binary), "."], cwd=REFERENCES_SOURCE,
                               env={**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
                               capture_output=True, text=True)
        if build.returncode != 0:
            self.missing_references["go-relay"] = self.missing_references["tcp-hop"] = build.stderr[-500:]
        else:
            for name, mode, headers, ca in (
                    ("go-relay", "http", {}, str(self.ca_file)),
                    ("tcp-hop", "tcp", {"Authorization": f"Bearer {tenant.sa_token}"}, str(self.cluster.ca_file))):
                port = free_port()
                env = {**os.environ, "RELAY_PORT": str(port), "RELAY_UPSTREAM": self.cluster.server,
                       "RELAY_UPSTREAM_CA": str(self.cluster.ca_file), "RELAY_TOKEN": tenant.sa_token,
                       "RELAY_TLS_CERT": cert, "RELAY_TLS_KEY": key}
                process = subprocess.Popen([str(binary), mode], env=env, stdout=subprocess.DEVNULL,
                                           stderr=open(self.root / f"{name}.log", "wb"))
                wait_for_port(port, name)
                self.references[name] = Reference(f"https://127.0.0.1:{port}", headers, ca, process)
        nginx = find_nginx()
        if nginx is None:
            self.missing_references["nginx"] = (f"nginx is not installed (`make bench` installs Debian's nginx-light"
                                                f" at {NGINX})")
            return
        port = free_port()
        directory = self.root / "nginx"
        directory.mkdir()
        upstream = self.cluster.server.removeprefix("https://")
        process = start_nginx(directory, f"""
  upstream api {{ server {upstream}; keepalive 1024; }}
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    location / {{
      proxy_pass https://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "Bearer {tenant.sa_token}";
      proxy_ssl_trusted_certificate {self.cluster.ca_file};
      proxy_ssl_verify on;
      proxy_ssl_name localhost;
      proxy_ssl_session_reuse on;
      proxy_buffering off;
      proxy_read_timeout 1h;
    }}
  }}
""", nginx)
        wait_for_port(port, "nginx")
        self.references["nginx"] = Reference(f"https://127.0.0.1:{port}", {}, str(self.ca_file), process)

    def stop(self) -> None:
        for process in (self.kubectl_proxy, self.floor_relay, self.gateway,
                        *(reference.process for reference in self.references.values())):
            stop_process(process)
        if self.cluster is not None:
            self.cluster.stop()

    def wait_ready(self, url: str, process: subprocess.Popen[bytes], name: str, seconds: float = 30) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        import urllib.request

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=1) as ready:
                    if ready.status == 200:
                        return
            except OSError:
                pass
            if process.poll() is not None:
                raise RuntimeError((self.root / f"{name}.log").read_text()[-2000:])
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not become ready")

    # -- measuring the gateway process -------------------------------------

    def gateway_process(self) -> psutil.Process:
        assert self.gateway is not None
        return psutil.Process(self.gateway.pid)

    @staticmethod
    def cpu_seconds(process: subprocess.Popen[bytes] | None) -> float:
        assert process is not None
        times = psutil.Process(process.pid).cpu_times()
        return float(times.user + times.system)

    def gateway_rss_mib(self) -> float:
        return float(self.gateway_process().memory_info().rss) / 2**20

    def gateway_fds(self) -> int:
        return int(self.gateway_process().num_fds())

    # -- clients -------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def session(self, **kwargs: Any) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=self.ssl_context()), **kwargs)

    async def new_user(self, session: aiohttp.ClientSession) -> tuple[str, str]:
        """An account registered and logged in through the gateway: its user id and session token."""
        email = f"bench-{uuid.uuid4().hex[:10]}@example.test"
        async with session.post(f"{self.gateway_url}/api/v1/auth/register", json={"email": email, "password": PASSWORD}) as r:
            assert r.status == 201, await r.text()
            user_id = str((await r.json())["id"])
        async with session.post(f"{self.gateway_url}/api/v1/auth/login", json={"email": email, "password": PASSWORD}) as r:
            token = str((await r.json())["token"])
        return user_id, token

    async def new_tenant(self, session: aiohttp.ClientSession) -> Tenant:
        user_id, token = await self.new_user(session)
        headers = {"Authorization": f"Bearer {token}"}
        async with session.post(f"{self.gateway_url}/api/v1/workspaces/init", json={}, headers=headers) as r:
            workspace = await r.json()
        assert self.cluster is not None
        sa_token = self.cluster.kubectl_run(
            "create", "token", "sa-tenant-admin", "-n", workspace["namespace"], "--duration=2h",
            kubeconfig=self.cluster.gateway_kubeconfig).stdout.strip()
        return Tenant(workspace["id"], workspace["namespace"], token, sa_token, user_id)

    async def metric(self, session: aiohttp.ClientSession, name: str) -> float:
        async with session.get(f"{self.metrics_urls['gateway']}/metrics") as r:
            text = await r.text()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and not line.startswith("#"))


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()


def run_load(job: dict[str, Any], *, module: str = "bench.load", timeout: float = 600) -> dict[str, Any]:
    """One measured burst from a separate process (`module` reads the job on stdin, prints its result)."""
    result = subprocess.run([sys.executable, "-m", module], input=json.dumps(job), capture_output=True,
                            text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return dict(json.loads(result.stdout))


async def to_thread_load(job: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(run_load, job)


def temp_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="tenant-gateway-bench-"))
