#!/usr/bin/env bash
# Refresh the vendored Chaos Mesh CRDs (src/kfchaos/data/chaos-mesh/crds/) from a Chaos Mesh tag or commit.
# Usage: scripts/refresh-crds.sh REF     e.g. scripts/refresh-crds.sh v2.7.2
# Needs git and network access to the chaos-mesh/chaos-mesh repository; the tests themselves never do.
set -euo pipefail
ref="${1:?usage: scripts/refresh-crds.sh REF (a Chaos Mesh tag or commit)}"
repo="${CHAOS_MESH_REPO:-https://github.com/chaos-mesh/chaos-mesh.git}"
dest="$(cd "$(dirname "$0")/.." && pwd)/src/kfchaos/data/chaos-mesh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git -C "$work" init --quiet
git -C "$work" remote add origin "$repo"
git -C "$work" fetch --quiet --depth 1 origin "$ref"
git -C "$work" checkout --quiet FETCH_HEAD -- config/crd/bases LICENSE
commit="$(git -C "$work" rev-parse --short FETCH_HEAD)"
rm -f "$dest"/crds/*.yaml
cp "$work"/config/crd/bases/chaos-mesh.org_*.yaml "$dest/crds/"
cp "$work/LICENSE" "$dest/LICENSE"
sed -i -E "s/at commit \`[0-9a-f]+\`[^;]*;/at commit \`$commit\` (ref $ref);/" "$dest/README.md"
echo "CRDs refreshed from chaos-mesh $ref ($commit): $(ls "$dest"/crds | wc -l) files. Now run: make test"
