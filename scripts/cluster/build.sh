#!/usr/bin/env bash
# Build the local control plane's binaries (docs/cluster.md) from the wrapper modules under cluster/, through
# the Go module proxy, CGO_ENABLED=0, -trimpath. Each component is cached under
#   ${KFCHAOS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kfchaos}/cluster/<component>-<version>-<sum>/
# where <sum> hashes the wrapper's go.mod and go.sum and the list of binaries below, so a changed pin or an added
# binary rebuilds and an unchanged component is skipped.
# Usage: scripts/cluster/build.sh [component ...]    (default: all; prints each component's directory)
# Builds run one after another under `nice -n 10`: the machine is shared.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${KFCHAOS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kfchaos}/cluster"
all=(etcd kubernetes kwok chaos-mesh kube-state-metrics kfp-apiserver argo coredns)

die() { echo "cluster build: $*" >&2; exit 1; }

# The binaries of each component: name=package[=cgo] (a package of the wrapper module or one it requires; `cgo`
# where the package needs a C compiler, else CGO_ENABLED=0 and a static binary).
binaries() {
  case "$1" in
    etcd) echo "etcd=." ;;
    # kubelet and kube-proxy run the real node (docs/cluster.md, "The real node").
    kubernetes) echo "kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver" \
      "kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager" \
      "kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler" \
      "kubelet=k8s.io/kubernetes/cmd/kubelet" \
      "kube-proxy=k8s.io/kubernetes/cmd/kube-proxy" ;;
    kwok) echo "kwok=sigs.k8s.io/kwok/cmd/kwok" ;;
    # chaos-daemon needs cgo: pkg/ptrace wraps C (chaos-mesh/chaos-mesh, pkg/ptrace/cwrapper_linux.go; upstream's
    # Makefile builds it with CGO_ENABLED=1). cdh is the helper its image carries (images/chaos-daemon/Dockerfile).
    chaos-mesh) echo "chaos-controller-manager=github.com/chaos-mesh/chaos-mesh/cmd/chaos-controller-manager" \
      "chaos-daemon=github.com/chaos-mesh/chaos-mesh/cmd/chaos-daemon=cgo" \
      "cdh=github.com/chaos-mesh/chaos-mesh/cmd/chaos-daemon-helper" ;;
    kube-state-metrics) echo "kube-state-metrics=k8s.io/kube-state-metrics/v2" ;;
    # KFP's API server needs cgo: its storage package reads go-sqlite3's error types, which only exist in the cgo
    # build (kubeflow/pipelines, backend/src/apiserver/storage/db.go). The driver and launcher are static, as
    # upstream builds them (backend/Dockerfile.driver, backend/Dockerfile.launcher: CGO_ENABLED=0).
    kfp-apiserver) echo "apiserver=github.com/kubeflow/pipelines/backend/src/apiserver=cgo" \
      "scheduledworkflow=github.com/kubeflow/pipelines/backend/src/crd/controller/scheduledworkflow" \
      "persistence-agent=github.com/kubeflow/pipelines/backend/src/agent/persistence" \
      "driver=github.com/kubeflow/pipelines/backend/src/v2/cmd/driver" \
      "launcher-v2=github.com/kubeflow/pipelines/backend/src/v2/cmd/launcher-v2" ;;
    argo) echo "workflow-controller=github.com/argoproj/argo-workflows/v3/cmd/workflow-controller" \
      "argoexec=github.com/argoproj/argo-workflows/v3/cmd/argoexec" ;;
    coredns) echo "coredns=github.com/coredns/coredns" ;;
    *) die "unknown component '$1' (known: ${all[*]})" ;;
  esac
}

# Go files a module's repository holds as symbolic links, which module zips leave out (a zip holds regular files
# only: golang.org/x/mod/zip), as "module=path=target" (path and target relative to the module's root). The build
# restores them in a copy of the module that a scratch go.mod (-modfile) replaces it with; Go refuses overlays of
# files in the module cache, so `go build -overlay` cannot.
# argo-workflows v3.3.10: workflow/executor/os-specific/signal_linux.go -> signal_darwin.go (git mode 120000).
module_symlinks() {
  case "$1" in
    argo) echo "github.com/argoproj/argo-workflows/v3=workflow/executor/os-specific/signal_linux.go=signal_darwin.go" ;;
  esac
}

# A go.mod for `go build -modfile` whose replace directives point each module of module_symlinks and
# module_objects (below) at a copy with its links restored and its objects compiled (nothing printed when the
# component has neither).
restored_modfile() {
  local c="$1" go="$2" work="$3" entry module path target copy
  [[ -n "$(module_symlinks "$c")$(module_objects "$c")" ]] || return 0
  mkdir -p "$work/src"
  cp "$root/cluster/$c/go.mod" "$work/go.mod"
  cp "$root/cluster/$c/go.sum" "$work/go.sum"
  for entry in $(module_symlinks "$c"); do
    module="${entry%%=*}"; path="${entry#*=}"; target="${path#*=}"; path="${path%%=*}"
    copy="$(module_copy "$c" "$go" "$work" "$module")" || exit 1
    [[ -f "$copy/$(dirname "$path")/$target" ]] || die "$c: $module has no $(dirname "$path")/$target (the link $path)"
    ln -sfn "$target" "$copy/$path"
  done
  for entry in $(module_objects "$c"); do
    module="${entry%%=*}"; path="${entry#*=}"; target="${path#*=}"; path="${path%%=*}"
    copy="$(module_copy "$c" "$go" "$work" "$module")" || exit 1
    command -v "${CC:-gcc}" >/dev/null 2>&1 || die "$c: $path needs a C compiler (gcc): apt-get install gcc"
    "${CC:-gcc}" -c "$copy/$target" -fPIE -O2 -o "$copy/$path" || die "$c: cc $target failed"
  done
  echo "$work/go.mod"
}

# A writable copy of `module` under $work/src, replacing it in $work/go.mod (made once per module).
module_copy() {
  local c="$1" go="$2" work="$3" module="$4" dir copy
  copy="$work/src/${module//\//_}"
  if [[ ! -d "$copy" ]]; then
    # `go list -m` names a module's folder only once it is in the module cache: before the component's first
    # `go build` (a fresh cache) it is not, so it is downloaded first.
    (cd "$root/cluster/$c" && GOFLAGS=-mod=readonly "$go" mod download "$module") >&2 \
      || die "$c: go mod download $module failed"
    dir="$(cd "$root/cluster/$c" && GOFLAGS=-mod=readonly "$go" list -m -f '{{.Dir}}' "$module")"
    [[ -n "$dir" && -d "$dir" ]] || die "$c: $module is not in the module cache after its download"
    cp -r "$dir" "$copy" || die "$c: copying $dir failed"
    chmod -R u+w "$copy"
    printf '\nreplace %s => %s\n' "$module" "$copy" >>"$work/go.mod"
  fi
  echo "$copy"
}

# The upstream module whose version names the component.
main_module() {
  case "$1" in
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    kubernetes) echo k8s.io/kubernetes ;;
    kwok) echo sigs.k8s.io/kwok ;;
    chaos-mesh) echo github.com/chaos-mesh/chaos-mesh ;;
    kube-state-metrics) echo k8s.io/kube-state-metrics/v2 ;;
    kfp-apiserver) echo github.com/kubeflow/pipelines ;;
    argo) echo github.com/argoproj/argo-workflows/v3 ;;
    coredns) echo github.com/coredns/coredns ;;
  esac
}

# The version go.mod requires of a module (a `require m v` line or a line inside a require block).
module_version() {
  awk -v m="$2" '$1 == "require" && $2 == m {print $3; exit} $1 == m && $2 ~ /^v/ {print $2; exit}' "$1"
}

# Object files upstream's Makefile compiles into a module's tree before `go build`, which embeds them, and which
# its zip therefore lacks, as "module=object=source" (relative to the module's root), made in the same copy as
# the links above with upstream's command. chaos-mesh: TimeChaos's fake clock, the vDSO replacement chaos-daemon
# writes into a target process (pkg/time/asset_linux.go `//go:embed fakeclock/*.o`; Makefile:
# `cc -c ./pkg/time/fakeclock/fake_clock_gettime.c -fPIE -O2 -o pkg/time/fakeclock/fake_clock_gettime.o`).
# Without them chaos-daemon builds and fails every TimeChaos ("read file from embedded fs ... does not exist").
module_objects() {
  case "$1" in
    chaos-mesh)
      local m=github.com/chaos-mesh/chaos-mesh f=pkg/time/fakeclock
      echo "$m=$f/fake_clock_gettime.o=$f/fake_clock_gettime.c" "$m=$f/fake_gettimeofday.o=$f/fake_gettimeofday.c" ;;
  esac
}

# Print the cache directory of a component (built or not), from its wrapper's go.mod/go.sum alone.
component_dir() {
  local c="$1" mod="$root/cluster/$1/go.mod" version sum
  [[ -f "$mod" ]] || die "cluster/$c/go.mod is missing"
  version="$(module_version "$mod" "$(main_module "$c")")"
  [[ -n "$version" ]] || die "cluster/$c/go.mod: no require line for $(main_module "$c")"
  sum="$( (cat "$mod" "$root/cluster/$c/go.sum"; binaries "$c"; extras_version "$c"; module_symlinks "$c"; module_objects "$c") | sha256sum | cut -c1-10)"
  echo "$cache/$c-$version-$sum"
}

# Bumped when extras() changes what it adds to a component, so the cache key changes with it.
extras_version() {
  case "$1" in
    kubernetes | chaos-mesh | kfp-apiserver) echo "extras-2" ;;
    *) echo "extras-1" ;;
  esac
}

# A C program of the module, built static with the machine's C compiler.
build_c() {
  local src="$1" out="$2"
  command -v "${CC:-gcc}" >/dev/null 2>&1 || die "building $(basename "$out") needs a C compiler (gcc): apt-get install gcc"
  "${CC:-gcc}" -Os -static -o "$out" "$src" || die "cc $src failed"
  strip "$out" 2>/dev/null || true
}

# Data files the binaries need at run time, copied from the same module version (not committed here).
extras() {
  local c="$1" go="$2" out="$3" src
  case "$c" in
    kubernetes)
      # The pod sandbox's pause program (kubernetes/kubernetes, build/pause/linux/pause.c; the image
      # registry.k8s.io/pause is this program alone), for the real node's sandbox image.
      src="$(cd "$root/cluster/$c" && GOFLAGS=-mod=readonly "$go" list -m -f '{{.Dir}}' k8s.io/kubernetes)"
      build_c "$src/build/pause/linux/pause.c" "$out/pause" ;;
    kwok)
      # The default Stages kwokctl hands to kwok (sigs.k8s.io/kwok, pkg/kwokctl/runtime/cluster.go,
      # getDefaultNodeStages with a lease, getDefaultPodStages).
      src="$(cd "$root/cluster/$c" && GOFLAGS=-mod=readonly "$go" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
      mkdir -p "$out/stages"
      cp "$src/kustomize/stage/node/fast/node-initialize.yaml" \
        "$src/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
        "$src/kustomize/stage/pod/fast/pod-ready.yaml" "$src/kustomize/stage/pod/fast/pod-complete.yaml" \
        "$src/kustomize/stage/pod/fast/pod-delete.yaml" "$out/stages/" ;;
    chaos-mesh)
      # The CRDs of the release the controller is built from (config/crd/bases in the module).
      src="$(cd "$root/cluster/$c" && GOFLAGS=-mod=readonly "$go" list -m -f '{{.Dir}}' github.com/chaos-mesh/chaos-mesh)"
      mkdir -p "$out/crds"
      cp "$src"/config/crd/bases/chaos-mesh.org_*.yaml "$out/crds/"
      # chaos-daemon's `pause` (hack/pause.c; upstream's Makefile: `cc ./hack/pause.c -o images/chaos-daemon/bin/pause`):
      # StressChaos starts its stressor stopped under it until the process is in the target's cgroup.
      build_c "$src/hack/pause.c" "$out/pause" ;;
    kfp-apiserver)
      # KFP's CRDs and the API server's and ScheduledWorkflow controller's Roles from the same module version
      # (manifests/kustomize/base/pipeline), and the Argo Workflow CRDs of the Argo version KFP's go.mod pins
      # (KFP installs Argo's minimal CRDs: manifests/kustomize/third-party/argo; argo-workflows
      # manifests/base/crds/minimal). Data files, read by scripts/cluster/localcluster/kfp.py.
      src="$(cd "$root/cluster/$c" && GOFLAGS=-mod=readonly "$go" list -m -f '{{.Dir}}' github.com/kubeflow/pipelines)"
      local argo
      argo="$(cd "$root/cluster/$c" && GOFLAGS=-mod=readonly "$go" list -m -f '{{.Dir}}' github.com/argoproj/argo-workflows/v3)"
      mkdir -p "$out/crds" "$out/rbac"
      cp "$src/manifests/kustomize/base/pipeline/cluster-scoped/scheduled-workflow-crd.yaml" "$out/crds/"
      cp "$argo"/manifests/base/crds/minimal/argoproj.io_*.yaml "$out/crds/"
      cp "$src/manifests/kustomize/base/pipeline/ml-pipeline-apiserver-role.yaml" \
        "$src/manifests/kustomize/base/pipeline/ml-pipeline-scheduledworkflow-role.yaml" "$out/rbac/"
      # What executes a run (scripts/cluster/localcluster/kfpexec.py): the Roles of the run's pods and of the
      # persistence agent, the ConfigMaps the driver and launcher read, and Argo's controller settings as KFP's
      # manifests patch them (manifests/kustomize/third-party/argo/base).
      mkdir -p "$out/exec"
      cp "$src/manifests/kustomize/base/pipeline/pipeline-runner-role.yaml" \
        "$src/manifests/kustomize/base/pipeline/ml-pipeline-persistenceagent-role.yaml" \
        "$src/manifests/kustomize/base/pipeline/kfp-launcher-configmap.yaml" \
        "$src/manifests/kustomize/base/metadata/base/metadata-grpc-configmap.yaml" \
        "$src/manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml" "$out/exec/"
      module_version "$root/cluster/$c/go.mod" github.com/kubeflow/pipelines >"$out/VERSION" ;;
  esac
}

find_go() {
  if [[ -n "${GO:-}" ]]; then echo "$GO"; return; fi
  if command -v go >/dev/null 2>&1; then command -v go; return; fi
  if [[ -x /usr/local/go/bin/go ]]; then echo /usr/local/go/bin/go; return; fi
  die "no Go toolchain: install Go >= 1.26 (https://go.dev/doc/install) or set GO=/path/to/go"
}

build_one() {
  local c="$1" dir go tmp entry name pkg version ldflags
  dir="$(component_dir "$c")"
  if [[ -f "$dir/.complete" ]]; then echo "$dir"; return; fi
  go="$(find_go)"
  "$go" version >/dev/null 2>&1 || die "no Go toolchain at $go: install Go >= 1.26 (https://go.dev/doc/install) or set GO=/path/to/go"
  mkdir -p "$cache"
  tmp="$(mktemp -d "$cache/.build-$c.XXXXXX")"
  trap 'rm -rf "$tmp"' RETURN
  ldflags="-s -w"
  if [[ "$c" == kubernetes ]]; then
    # Without these the binaries call themselves v0.0.0-master+$Format:...$; upstream's build sets them the same
    # way (kubernetes/kubernetes, hack/lib/version.sh, kube::version::ldflags).
    version="$(module_version "$root/cluster/$c/go.mod" k8s.io/kubernetes)"
    local major minor
    major="${version#v}"; major="${major%%.*}"
    minor="${version#v*.}"; minor="${minor%%.*}"
    ldflags+=" -X k8s.io/component-base/version.gitVersion=$version"
    ldflags+=" -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
    ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  fi
  local cgo modfile modfile_flag=()
  # A function's `die` in $(...) ends only that subshell: its status is checked here.
  modfile="$(restored_modfile "$c" "$go" "$tmp/restored")" || die "$c: preparing the module copy failed (above)"
  [[ -z "$modfile" ]] || modfile_flag=(-modfile "$modfile")
  for entry in $(binaries "$c"); do
    name="${entry%%=*}"; pkg="${entry#*=}"; cgo=0
    if [[ "$pkg" == *=cgo ]]; then
      pkg="${pkg%=cgo}"; cgo=1
      command -v "${CC:-gcc}" >/dev/null 2>&1 || die "$c: $name needs cgo and a C compiler (gcc): apt-get install gcc"
    fi
    echo "cluster build: $c: $name ($pkg) ..." >&2
    if ! (cd "$root/cluster/$c" && CGO_ENABLED="$cgo" GOFLAGS=-mod=readonly GOTOOLCHAIN=local \
          /usr/bin/time -v -o "$tmp/$name.time" nice -n 10 \
          "$go" build -trimpath "${modfile_flag[@]}" -ldflags "$ldflags" -o "$tmp/$name" "$pkg") 2>"$tmp/$name.log"; then
      tail -n 30 "$tmp/$name.log" >&2
      if grep -qiE 'proxy|dial tcp|no such host|connection refused|403 Forbidden|i/o timeout' "$tmp/$name.log"; then
        die "$c: the Go module proxy (GOPROXY=$("$go" env GOPROXY)) could not serve a module: see above"
      fi
      die "$c: go build $pkg failed: see above"
    fi
  done
  rm -rf "$tmp/restored"
  extras "$c" "$go" "$tmp"
  mkdir -p "$(dirname "$dir")"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - RETURN
  touch "$dir/.complete"
  echo "$dir"
}

if [[ "${1:-}" == "--dir" ]]; then shift; component_dir "${1:?usage: build.sh --dir COMPONENT}"; exit; fi
if (($#)); then todo=("$@"); else todo=("${all[@]}"); fi
for c in "${todo[@]}"; do build_one "$c"; done
