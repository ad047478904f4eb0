"""The real node's container images, built here without a registry (docs/cluster.md, "Images").

Nothing is pulled. One Debian layer (mmdebstrap, bookworm, from the machine's apt sources) is shared by every image
but `pause`; each image adds a layer of its own: the binaries built by scripts/cluster/build.sh, or kfchaos installed
from the working tree into a virtualenv (its dependencies as wheels from PyPI). umoci assembles them into one OCI
layout; `ctr images import` loads it into the node's containerd, whose pods use them with IfNotPresent.

Every step is cached under ${KFCHAOS_CACHE:-~/.cache/kfchaos}/images, keyed by a hash of its inputs, so a second
build does nothing. The cache is bounded: each kind of entry keeps its KEEP_PER_KIND most recently used, since every
change to the sources keys a new component layer (700 MB) and a new archive (400 MB), and unbounded they filled the
disk. The names below are the one place image references are made; cluster-up writes the ones pipelines need into
`<state>/env` (KFCHAOS_IMAGE, ...).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import PROGRAMS

REGISTRY = "kfchaos.local"
# Debian packages of the shared layer: Python for kfchaos, and what chaos-daemon calls
# (chaos-mesh/chaos-mesh, images/chaos-daemon/Dockerfile: iptables ipset stress-ng iproute2 util-linux procps).
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = (
    "ca-certificates",
    "python3",
    "python3-venv",
    "iptables",
    "ipset",
    "iproute2",
    "stress-ng",
    "procps",
    "util-linux",
    "tzdata",
    # vLLM's CPU kernels (vllm/_C.abi3.so) link libnuma: the real engine's pod runs on this layer with the host's
    # install of vLLM mounted (tests/cluster/node/vllmpod.py).
    "libnuma1",
)
DEBIAN_LAYER_VERSION = "1"  # bump when the customize hooks below change
COMPONENT_LAYER_VERSION = "2"  # bump when component_layer() changes what it puts in the layer
# Versions that name images (the components' go.mod pins; pause is the program build.sh compiles).
PAUSE_TAG = "3.10"
ARGO_TAG = "v3.3.10"
KFP_TAG = "2.1.0"
CHAOS_DAEMON_TAG = "v2.8.4-47411975"
SOURCE_PATHS = ("src", "pyproject.toml", "README.md", "experiments", "baselines", "traffic")
VENV = "/opt/kfchaos/venv"
USER_ID = 10001  # the Dockerfile's `USER 10001`
# KFP's launcher keeps a task's output artifacts under a local path made from the artifact's URI, /minio/..., /s3/...
# or /gcs/... (kubeflow/pipelines, backend/src/v2/component/launcher_v2.go, LocalPathForURI), creating the
# directories itself: in an image whose user is not root they must exist and be that user's (the Dockerfile too).
ARTIFACT_ROOTS = ("minio", "s3", "gcs")


class ImageError(RuntimeError):
    pass


def cache_root() -> Path:
    """${KFCHAOS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kfchaos}, the cache scripts/cluster/build.sh uses too."""
    if os.environ.get("KFCHAOS_CACHE"):
        return Path(os.environ["KFCHAOS_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfchaos"


def cache_dir() -> Path:
    return cache_root() / "images"


KEEP_PER_KIND = 3  # a working tree, a clean clone beside it and one more find theirs without a rebuild


def _used(entry: Path) -> Path:
    """Mark a cache entry as just used (its mtime), so that pruning keeps it; returns it."""
    os.utime(entry)
    return entry


def _prune(kept: Path) -> Path:
    """Remove the entries of `kept`'s kind (its name with another key: `<kind>-<12 hex digits><suffix>`) beyond the
    KEEP_PER_KIND most recently used; `kept` itself is never removed. Returns `kept`."""
    kind = re.fullmatch(r"(.+-)[0-9a-f]{12}(\.tar)?", kept.name)
    if kind is None:
        raise ImageError(f"{kept.name}: not a cache entry's name (<kind>-<key>[.tar])")
    same_kind = re.compile(re.escape(kind.group(1)) + r"[0-9a-f]{12}" + re.escape(kind.group(2) or ""))
    others = [entry for entry in kept.parent.iterdir() if same_kind.fullmatch(entry.name) and entry != kept]
    others.sort(key=lambda entry: entry.stat().st_mtime, reverse=True)
    for stale in others[KEEP_PER_KIND - 1 :]:
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    return kept


@dataclass(frozen=True)
class Images:
    """The references of the node's images (what manifests, the KFP backend and compile name)."""

    pause: str
    component: str
    argoexec: str
    kfp_driver: str
    kfp_launcher: str
    chaos_daemon: str
    archive: Path  # the OCI archive holding all of them

    def all(self) -> dict[str, str]:
        return {
            "pause": self.pause,
            "component": self.component,
            "argoexec": self.argoexec,
            "kfp-driver": self.kfp_driver,
            "kfp-launcher": self.kfp_launcher,
            "chaos-daemon": self.chaos_daemon,
        }


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run(argv: list[str], **kwargs: object) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise ImageError(f"{' '.join(argv[:6])} ...: exit {done.returncode}\n{(done.stderr or done.stdout)[-4000:]}")


def _tree_files(root: Path) -> list[Path]:
    """The working tree's files under SOURCE_PATHS that git tracks or would track (untracked, not ignored)."""
    done = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "--", *SOURCE_PATHS],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ImageError(f"git ls-files in {root}: {done.stderr.strip()}")
    return sorted(root / line for line in done.stdout.splitlines() if (root / line).is_file())


def source_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in _tree_files(root):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:10]


# --- layers ----------------------------------------------------------------------------------------------


def _normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = 0
    info.uname = info.gname = ""
    return info


def _layer_of_files(out: Path, files: Iterable[tuple[Path, str, int]]) -> Path:
    """An uncompressed layer tar of (source, path in the image, mode), parent directories included."""
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for source, target, mode in files:
            parts = Path(target.lstrip("/")).parts
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in made:
                    info = tarfile.TarInfo(directory)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(_normalize(info))
                    made.add(directory)
            info = tar.gettarinfo(str(source), arcname="/".join(parts))
            info.mode = mode
            info.uid = info.gid = 0
            with source.open("rb") as data:
                tar.addfile(_normalize(info), data)
    tmp.rename(out)
    return out


def debian_layer() -> Path:
    """The shared Debian layer: mmdebstrap's minbase of DEBIAN_SUITE with DEBIAN_PACKAGES, as a tarball.
    iptables is set to its legacy backend as chaos-daemon's image does (images/chaos-daemon/Dockerfile)."""
    key = _digest(DEBIAN_SUITE, *DEBIAN_PACKAGES, DEBIAN_LAYER_VERSION)
    out = cache_dir() / f"debian-{DEBIAN_SUITE}-{key}.tar"
    if out.is_file():
        return _used(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial.tar")
    _run(
        [
            "mmdebstrap",
            "--mode=root",
            "--variant=minbase",
            "--quiet",
            f"--include={','.join(DEBIAN_PACKAGES)}",
            '--customize-hook=chroot "$1" update-alternatives --set iptables /usr/sbin/iptables-legacy',
            '--customize-hook=chroot "$1" update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy',
            f'--customize-hook=chroot "$1" useradd --uid {USER_ID} --no-create-home --shell /usr/sbin/nologin kfchaos',
            # apt's lists and caches are not wanted in an image.
            '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin',
            DEBIAN_SUITE,
            str(tmp),
        ],
        env={**os.environ, "SOURCE_DATE_EPOCH": "0"},
    )
    tmp.rename(out)
    return _prune(out)


def wheelhouse(root: Path, pip: Path) -> Path:
    """kfchaos's dependencies as wheels (from PyPI), keyed by pyproject.toml; built with the project's own pip,
    whose Python has the same minor version (3.11) as Debian bookworm's python3."""
    key = _digest((root / "pyproject.toml").read_bytes())
    out = cache_dir() / f"wheels-{key}"
    if (out / ".complete").is_file():
        return _used(out)
    tmp = Path(tempfile.mkdtemp(prefix=".wheels-", dir=cache_dir()))
    try:
        _run([str(pip), "wheel", "--quiet", "--wheel-dir", str(tmp), str(root)])
        for own in tmp.glob("kfchaos-*.whl"):
            own.unlink()
        (tmp / ".complete").touch()
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _prune(out)


def component_layer(root: Path, pip: Path, debian: Path) -> tuple[Path, str]:
    """kfchaos installed from the working tree into VENV on the Debian layer's python3, with the experiments,
    baselines and traffic the Dockerfile copies into /opt/kfchaos. Returns the layer and the image tag."""
    from_tree = source_digest(root)
    version = _package_version(root)
    wheels = wheelhouse(root, pip)
    key = _digest(debian.name, wheels.name, from_tree, COMPONENT_LAYER_VERSION)
    out = cache_dir() / f"component-{key}.tar"
    tag = f"{version.replace('+', '-')}-{from_tree}"
    if out.is_file():
        return _used(out), tag
    work = Path(tempfile.mkdtemp(prefix=".component-", dir=cache_dir()))
    try:
        rootfs = work / "rootfs"
        rootfs.mkdir()
        _run(["tar", "-C", str(rootfs), "-xf", str(debian)])
        own = work / "own"
        _run([str(pip), "wheel", "--quiet", "--no-deps", "--wheel-dir", str(own), str(root)])
        (rootfs / "tmp" / "wheels").mkdir(parents=True)
        for wheel in [*wheels.glob("*.whl"), *own.glob("*.whl")]:
            shutil.copy(wheel, rootfs / "tmp" / "wheels" / wheel.name)
        chroot_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        _run(["chroot", str(rootfs), "python3", "-m", "venv", VENV], env=chroot_env)
        _run(
            [
                "chroot",
                str(rootfs),
                f"{VENV}/bin/pip",
                "install",
                "--quiet",
                "--no-index",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--find-links",
                "/tmp/wheels",
                "kfchaos",
            ],
            env=chroot_env,
        )
        opt = rootfs / "opt" / "kfchaos"
        for name in ("experiments", "baselines", "traffic"):
            if (root / name).is_dir():
                shutil.copytree(root / name, opt / name, ignore=shutil.ignore_patterns(".*"))
        for mount_root in ARTIFACT_ROOTS:
            (rootfs / mount_root).mkdir()
        tmp = out.with_suffix(".tmp")
        reproducible = ["--sort=name", "--mtime=@0", "--numeric-owner"]
        _run(["tar", "-C", str(rootfs), *reproducible, "--owner=0", "--group=0", "-cf", str(tmp), "opt/kfchaos"])
        _run(
            [
                "tar",
                "-C",
                str(rootfs),
                *reproducible,
                f"--owner={USER_ID}",
                f"--group={USER_ID}",
                "-rf",
                str(tmp),
                *ARTIFACT_ROOTS,
            ]
        )
        tmp.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _prune(out), tag


def _package_version(root: Path) -> str:
    project = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {})
    if "version" not in project:
        raise ImageError("pyproject.toml: [project] has no version")
    return str(project["version"])


# --- the images ------------------------------------------------------------------------------------------

NSEXEC = PROGRAMS / "nsexec.py"
MEMSTRESS = PROGRAMS / "memstress.py"


@dataclass(frozen=True)
class _Image:
    ref: str
    base: bool  # on the Debian layer
    layers: tuple[Path, ...]
    config: tuple[str, ...]  # umoci config flags


def _images(root: Path, pip: Path, bins: dict[str, Path]) -> list[_Image]:
    cache = cache_dir() / "layers"
    cache.mkdir(parents=True, exist_ok=True)

    def files_layer(name: str, files: list[tuple[Path, str, int]]) -> Path:
        key = _digest(*(f"{target}:{mode}:{_file_digest(source)}" for source, target, mode in files))
        out = cache / f"{name}-{key}.tar"
        return _used(out) if out.is_file() else _prune(_layer_of_files(out, files))

    debian = debian_layer()
    component, component_tag = component_layer(root, pip, debian)
    k8s, kfp, argo, chaos = bins["kubernetes"], bins["kfp-apiserver"], bins["argo"], bins["chaos-mesh"]
    bin_dir = "/usr/local/bin"
    path_env = f"--config.env=PATH={bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"
    return [
        # registry.k8s.io/pause is its one program (kubernetes/kubernetes, build/pause/Dockerfile: FROM scratch).
        _Image(
            f"{REGISTRY}/pause:{PAUSE_TAG}",
            False,
            (files_layer("pause", [(k8s / "pause", "/pause", 0o755)]),),
            ("--config.entrypoint=/pause", "--config.user=65535:65535"),
        ),
        # The Dockerfile's image: kfchaos in a virtualenv on PATH, USER 10001, /opt/kfchaos as working directory.
        _Image(
            f"{REGISTRY}/kfchaos:{component_tag}",
            True,
            (component,),
            (
                f"--config.env=PATH={VENV}/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--config.env=PYTHONDONTWRITEBYTECODE=1",
                "--config.env=PYTHONUNBUFFERED=1",
                f"--config.user={USER_ID}",
                "--config.workingdir=/opt/kfchaos",
                "--config.cmd=kfchaos",
                "--config.cmd=--help",
            ),
        ),
        # argoproj/argo-workflows v3.3.10, Dockerfile (target argoexec): the binary on PATH as the entrypoint.
        _Image(
            f"{REGISTRY}/argoexec:{ARGO_TAG}",
            True,
            (files_layer("argoexec", [(argo / "argoexec", f"{bin_dir}/argoexec", 0o755)]),),
            (path_env, "--config.entrypoint=argoexec"),
        ),
        # kubeflow/pipelines 2.1.0, backend/Dockerfile.driver and Dockerfile.launcher (the Workflow runs them
        # by name: `driver`, `launcher-v2 --copy ...`, backend/src/v2/compiler/argocompiler/container.go).
        _Image(
            f"{REGISTRY}/kfp-driver:{KFP_TAG}",
            True,
            (files_layer("kfp-driver", [(kfp / "driver", f"{bin_dir}/driver", 0o755)]),),
            (path_env, "--config.entrypoint=driver"),
        ),
        _Image(
            f"{REGISTRY}/kfp-launcher:{KFP_TAG}",
            True,
            (files_layer("kfp-launcher", [(kfp / "launcher-v2", f"{bin_dir}/launcher-v2", 0o755)]),),
            (path_env, "--config.entrypoint=launcher-v2"),
        ),
        # chaos-mesh/chaos-mesh, images/chaos-daemon/Dockerfile: chaos-daemon, pause and cdh in /usr/local/bin
        # beside Debian's stress-ng, iptables (legacy), ipset and iproute2. nsexec and memStress are ports of
        # upstream's (nsexec.py and memstress.py say why); toda, tproxy and byteman are release downloads from
        # GitHub that no registry here serves, so the faults that need them (IOChaos, HTTPChaos, JVMChaos) fail
        # with chaos-daemon's own error.
        _Image(
            f"{REGISTRY}/chaos-daemon:{CHAOS_DAEMON_TAG}",
            True,
            (
                files_layer(
                    "chaos-daemon",
                    [
                        (chaos / "chaos-daemon", f"{bin_dir}/chaos-daemon", 0o755),
                        (chaos / "cdh", f"{bin_dir}/cdh", 0o755),
                        (chaos / "pause", f"{bin_dir}/pause", 0o755),
                        (NSEXEC, f"{bin_dir}/nsexec", 0o755),
                        (MEMSTRESS, f"{bin_dir}/memStress", 0o755),
                    ],
                ),
            ),
            (path_env, "--config.env=RUST_BACKTRACE=1", "--config.entrypoint=chaos-daemon"),
        ),
    ]


def build(root: Path, pip: Path, bins: dict[str, Path]) -> Images:
    """Every image of the node in one OCI archive (cached: an unchanged set is not assembled again)."""
    specs = _images(root, pip, bins)
    debian = debian_layer()
    key = _digest(debian.name, *(f"{s.ref}|{s.base}|{[p.name for p in s.layers]}|{s.config}" for s in specs))
    archive = cache_dir() / f"node-images-{key}.tar"
    refs = {s.ref.split("/", 1)[1].split(":", 1)[0]: s.ref for s in specs}
    images = Images(
        pause=refs["pause"],
        component=refs["kfchaos"],
        argoexec=refs["argoexec"],
        kfp_driver=refs["kfp-driver"],
        kfp_launcher=refs["kfp-launcher"],
        chaos_daemon=refs["chaos-daemon"],
        archive=archive,
    )
    if archive.is_file():
        _used(archive)
        return images
    work = Path(tempfile.mkdtemp(prefix=".oci-", dir=cache_dir()))
    try:
        layout = work / "layout"
        _run(["umoci", "init", "--layout", str(layout)])
        _run(["umoci", "new", "--image", f"{layout}:scratch"])
        _run(
            [
                "umoci",
                "raw",
                "add-layer",
                "--no-history",
                "--image",
                f"{layout}:scratch",
                "--tag",
                "debian",
                str(debian),
            ]
        )
        names: dict[str, str] = {}
        for index, spec in enumerate(specs):
            tag = f"image{index}"
            names[tag] = spec.ref
            source = "debian" if spec.base else "scratch"
            for number, layer in enumerate(spec.layers):
                _run(
                    [
                        "umoci",
                        "raw",
                        "add-layer",
                        "--no-history",
                        "--image",
                        f"{layout}:{source if number == 0 else tag}",
                        "--tag",
                        tag,
                        str(layer),
                    ]
                )
            _run(["umoci", "config", "--no-history", "--image", f"{layout}:{tag}", *spec.config])
        _name_images(layout, names)
        tmp = archive.with_suffix(".tmp")
        _run(["tar", "-C", str(layout), "-cf", str(tmp), "."])
        tmp.rename(archive)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _prune(archive)
    return images


def _name_images(layout: Path, names: dict[str, str]) -> None:
    """Give each manifest its full reference: containerd's importer names an image by the index entry's
    io.containerd.image.name annotation (containerd, images/archive/importer.go), and umoci's tags (the
    org.opencontainers.image.ref.name annotation) cannot hold a registry and a repository."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    kept = []
    for manifest in index["manifests"]:
        tag = manifest.get("annotations", {}).get("org.opencontainers.image.ref.name")
        if tag in names:
            manifest["annotations"] = {
                "io.containerd.image.name": names[tag],
                "org.opencontainers.image.ref.name": names[tag].rsplit(":", 1)[1],
            }
            kept.append(manifest)
    index["manifests"] = kept
    index_path.write_text(json.dumps(index))
