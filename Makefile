# The README's two commands are `make run` and `make test`; .ci/run calls `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

CHROMIUM := /usr/bin/chromium
IPTABLES := /usr/sbin/iptables

.PHONY: run test test-pure test-component test-cluster lint bench cluster-binaries service-binaries helm-binary keycloak-dist clean

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

# Helm 3 for tests/integration/test_team_tools.py, built the same way and
# cached beside them. On a fresh machine `make test` builds it in the
# background while the pure and component rings run (no cluster needed
# there), so it adds nothing to the run unless those finish first.
helm-binary:
	bash deploy/local-cluster/build-helm.sh >/dev/null

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

run: $(STAMP) cluster-binaries service-binaries $(IPTABLES)
	$(BIN)/tenant-gateway dev

lint: $(STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

# The suite in rings, fastest first, each its own pytest run: a failure in
# an inner ring stops the run before the slow ones start, and explains any
# failure they would have shown. The cluster ring starts the control plane,
# node, PostgreSQL, Keycloak and Chromium once and shares them (browser tests last).
# helm, kube-proxy and CoreDNS (for the cluster ring) build meanwhile on a
# fresh machine, one after the other (two Go links at once would need too
# much memory beside the rings): see helm-binary and service-binaries.
test: $(STAMP)
	@mkdir -p .gateway
	@{ bash deploy/local-cluster/build-helm.sh >/dev/null 2>.gateway/helm-build.log || { cat .gateway/helm-build.log >&2; exit 1; }; \
	   bash deploy/local-cluster/build-services.sh >/dev/null 2>.gateway/services-build.log || { cat .gateway/services-build.log >&2; exit 1; }; \
	 } & builds=$$!; \
	  $(MAKE) --no-print-directory test-pure test-component || exit 1; \
	  wait $$builds || exit 1; \
	  $(MAKE) --no-print-directory test-cluster

test-pure: lint
	$(BIN)/pytest -p no:cacheprovider tests/unit

test-component: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider tests/component

test-cluster: $(STAMP) cluster-binaries service-binaries helm-binary keycloak-dist $(CHROMIUM) $(IPTABLES)
	$(BIN)/pytest -p no:cacheprovider tests/integration tests/attacks tests/browser

bench: $(STAMP) cluster-binaries service-binaries keycloak-dist $(IPTABLES)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .gateway
