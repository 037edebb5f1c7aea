# The README's two commands are `make run` and `make test`; .ci/run calls `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

CHROMIUM := /usr/bin/chromium
IPTABLES := /usr/sbin/iptables
NGINX    := /usr/sbin/nginx

.PHONY: run test test-pure test-component test-cluster lint bench bench-scale cluster-binaries service-binaries helm-binary image keycloak-dist manifests clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# First run on a machine builds the control plane from the Go module proxy
# (~10-15 min on 2 cores); later runs find it in ~/.cache/tenant-gateway.
cluster-binaries:
	bash deploy/local-cluster/build.sh >/dev/null

# kube-proxy and CoreDNS, so the local cluster runs Services (devstack/services.py),
# built the same way and cached beside them; `make test` builds them in the
# background like helm.
service-binaries:
	bash deploy/local-cluster/build-services.sh >/dev/null

# kube-proxy programs Services with Debian's iptables. Installed only when missing.
$(IPTABLES):
	@command -v apt-get >/dev/null || { echo "the local cluster's kube-proxy needs iptables at $(IPTABLES); install it"; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables >/dev/null; }

# The benchmark's nginx reference relay (bench/stack.py start_references) and
# the rolling restart's balancer (bench/rolling.py) are Debian's nginx-light.
# Installed only when missing; without it the run has no nginx column.
$(NGINX):
	@command -v apt-get >/dev/null || { echo "make bench needs nginx at $(NGINX) (Debian: nginx-light); install it"; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null; }

# Helm 3 for the chart's tests (tests/component/test_helm_chart.py, and in the
# cluster ring test_helm_chart_install.py and test_team_tools.py), built the
# same way and cached beside them. On a fresh machine `make test` builds it in
# the background while lint and the pure ring run, and waits for it before the
# component ring: the chart's tests render with it, offline.
helm-binary:
	bash deploy/local-cluster/build-helm.sh >/dev/null

# The gateway's OCI image, built from the Dockerfile by buildah on a Python
# base made from Debian packages (no registry here to pull python:3.11-slim
# from; devstack/image.py installs buildah and mmdebstrap with apt-get when
# missing). Prints nothing; the archive, for `ctr images import`, is cached in
# ~/.cache/tenant-gateway/image keyed by the Dockerfile and what it copies:
# ~3 min the first time, instant while the sources are unchanged.
# tests/integration/test_image.py runs it on the local node.
image:
	$(PYTHON) -m devstack.image >/dev/null

# The browser tests (tests/browser) drive Debian's Chromium headless:
# Playwright cannot download its own browsers here. Installed only when missing.
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "tests/browser needs Chromium at $(CHROMIUM); install it"; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }

# The identity provider the SSO tests sign in through (devstack/keycloak.py):
# fetched once from Maven Central into ~/.cache/tenant-gateway.
keycloak-dist: $(STAMP)
	$(BIN)/python -c "from devstack.keycloak import ensure_distribution; ensure_distribution()"

# `make run CLUSTERS=2`: a second local control plane too, both served (README).
CLUSTERS ?= 1
run: $(STAMP) cluster-binaries service-binaries $(IPTABLES)
	$(BIN)/tenant-gateway dev --clusters $(CLUSTERS)

lint: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

# The suite in rings, fastest first, each its own pytest run: a failure in
# an inner ring stops the run before the slow ones start, and explains any
# failure they would have shown. The cluster ring starts the control plane,
# node, PostgreSQL, Keycloak and Chromium once and shares them (browser tests last).
# helm (for the component and cluster rings), then kube-proxy and CoreDNS
# (after helm, not beside it: two Go links at once need too much memory
# beside the rings), and the image (for the cluster ring) build meanwhile on
# a fresh machine: see helm-binary, service-binaries and image. The component
# ring starts once helm is built (.gateway/helm.built), not the whole chain.
test: $(STAMP)
	@mkdir -p .gateway; rm -f .gateway/helm.built
	@{ bash deploy/local-cluster/build-helm.sh >/dev/null 2>.gateway/helm-build.log && touch .gateway/helm.built && \
	   bash deploy/local-cluster/build-services.sh >/dev/null 2>.gateway/services-build.log; } & builds=$$!; \
	  $(PYTHON) -m devstack.image >/dev/null 2>.gateway/image-build.log & image=$$!; \
	  $(MAKE) --no-print-directory test-pure || exit 1; \
	  while [ ! -e .gateway/helm.built ] && kill -0 $$builds 2>/dev/null; do sleep 1; done; \
	  [ -e .gateway/helm.built ] || { cat .gateway/helm-build.log >&2; exit 1; }; \
	  $(MAKE) --no-print-directory test-component || exit 1; \
	  wait $$builds || { cat .gateway/services-build.log >&2; exit 1; }; \
	  wait $$image || { cat .gateway/image-build.log >&2; exit 1; }; \
	  $(MAKE) --no-print-directory test-cluster

test-pure: lint
	$(BIN)/pytest -p no:cacheprovider tests/unit

test-component: $(STAMP) helm-binary
	$(BIN)/pytest -p no:cacheprovider tests/component

test-cluster: $(STAMP) cluster-binaries service-binaries helm-binary image keycloak-dist $(CHROMIUM) $(IPTABLES)
	$(BIN)/pytest -p no:cacheprovider tests/integration tests/attacks tests/browser

bench: $(STAMP) cluster-binaries service-binaries keycloak-dist $(IPTABLES) $(NGINX)
	$(BIN)/python -m bench

# Issue 41's scale run (bench/workloads/scale.py): 100, 1,000 and 10,000
# workspaces onboarded into the local cluster, every figure measured at each
# size; results/scale.json and results/scale.png. About 15 minutes.
bench-scale: $(STAMP) cluster-binaries service-binaries $(IPTABLES)
	$(BIN)/python -m bench.workloads.scale

# deploy/kubernetes from the Helm chart (devstack/chart.py): run after editing
# the chart; tests/component/test_helm_chart.py fails until the two agree.
manifests: $(STAMP) helm-binary
	$(BIN)/python -m devstack.chart

clean:
	rm -rf $(VENV) .gateway
