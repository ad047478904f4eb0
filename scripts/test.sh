#!/usr/bin/env bash
# `make test`: the tests that need no cluster run while the local cluster's binaries and images build, then
# tests/cluster starts the cluster from them. A Go build leaves one of two cores idle most of the time (it links on
# one: docs/cluster.md, "Build"), so on a fresh machine the two together take about as long as the build alone.
# A cluster that cannot be built: its tests skip saying why, except under CI=true, where that is a failure
# (tests/cluster/conftest.py). Both runs exclude the longest real-node tests (marker node_long: `make e2e-local`).
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
log=$(mktemp -t kfchaos-cluster-build.XXXXXX)
# A session of its own, so that an interrupted `make test` stops the Go builds too.
PYTHONPATH=scripts/cluster setsid "$python" -m localcluster build >"$log" 2>&1 &
build=$!
trap 'kill -- "-$build" 2>/dev/null; rm -f "$log"' EXIT

# The real engine (`make vllm`: a pip install of ~5.6 GB on a fresh machine, nothing once cached) only after the
# build has started: the build is the longest part of a fresh machine's run, and the install is mostly download
# and disk. Under CI=true an engine that cannot be installed fails the run here (scripts/ensure-vllm.sh).
bash scripts/ensure-vllm.sh || exit 1

# Ahead of the build (build.sh runs Go under nice -n 10), these tests keep the first claim on the CPU.
# `tests` named, never left to pytest's testpaths: those count only where pytest's invocation folder is its rootdir, and
# elsewhere tests/conftest.py's plugin (tests/support/timing.py) loads too late for its options (--timing-report).
# First the real engine's tests, alone: they measure the engine (its TTFT against the replay's, its OOM kill as the
# exporters show it), and beside another worker on two cores three of them failed (docs/development.md).
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words
"$python" -m pytest -m "not node_long" tests/engine ${PYTEST_ARGS:-}
engine=$?
# Then the rest, two at once (pytest-xdist; KFCHAOS_TEST_WORKERS, 0 for one at a time): half their time is waiting
# (on a server, a stage, a subprocess). A file's tests, and the files that share a session fixture, stay on one
# worker (tests/support/groups.py). Not more than two: a replay whose sender falls behind is judged INCONCLUSIVE, as
# it must be, and four workers on two cores made the demo's tuned run so.
# shellcheck disable=SC2086
"$python" -m pytest -m "not node_long" -n "${KFCHAOS_TEST_WORKERS:-2}" --dist loadgroup tests --ignore=tests/cluster \
    --ignore=tests/engine ${PYTEST_ARGS:-}
without_cluster=$?

echo "--- the local cluster's build (scripts/cluster/build.sh, images.py):"
wait "$build"
built=$?
cat "$log"
if [ "$built" -ne 0 ] && [ "${CI:-}" = true ]; then
    echo "the local cluster could not be built (CI=true: a failure)" >&2
    exit 1
fi

# shellcheck disable=SC2086
"$python" -m pytest -m "not node_long" tests/cluster ${PYTEST_ARGS:-}
with_cluster=$?
[ "$engine" -eq 0 ] && [ "$without_cluster" -eq 0 ] && [ "$with_cluster" -eq 0 ]
