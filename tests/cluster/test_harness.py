"""The build script and the process bookkeeping behind `make cluster-up` / `make cluster-down`, without a cluster:
a cached build runs no Go at all, a missing Go toolchain or an unreachable module proxy is named, and stopping
leaves no process behind (children included)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.cluster.conftest import ROOT, controlplane
from tests.cluster.test_smoke import eventually
from tests.conftest import require_tool

pytestmark = pytest.mark.cluster

BUILD = ROOT / "scripts" / "cluster" / "build.sh"


def run_build(env: dict[str, str], *components: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BUILD), *components], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )


def test_a_second_run_builds_nothing() -> None:
    """With every component cached the script never calls Go: GO=/bin/false would fail any build."""
    cached = run_build({"GO": "/bin/false"})
    if cached.returncode != 0:
        message = f"the control plane is not built yet (make cluster-build): {cached.stderr.strip()[-300:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    dirs = [Path(line) for line in cached.stdout.split()]
    assert [d.name.split("-v")[0] for d in dirs] == list(controlplane.COMPONENTS)
    assert all((d / ".complete").is_file() for d in dirs)


def test_a_missing_go_toolchain_is_named(tmp_path: Path) -> None:
    done = run_build({"KFCHAOS_CACHE": str(tmp_path), "GO": str(tmp_path / "no-go")}, "etcd")
    assert done.returncode == 1
    assert "no Go toolchain" in done.stderr and "GO=/path/to/go" in done.stderr


def test_an_unreachable_module_proxy_is_named(tmp_path: Path) -> None:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        require_tool("go", "building the control plane")
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {
        "KFCHAOS_CACHE": str(tmp_path / "cache"),
        "GOMODCACHE": str(tmp_path / "mod"),  # empty: every module must come from the proxy
        "GOPROXY": f"http://127.0.0.1:{port}",
        "GO": str(go),
    }
    done = run_build(env, "etcd")
    subprocess.run([str(go), "clean", "-modcache"], env={**os.environ, **env}, capture_output=True, check=False)
    assert done.returncode == 1
    assert "the Go module proxy" in done.stderr and f"127.0.0.1:{port}" in done.stderr
    assert not list((tmp_path / "cache").glob("etcd-*"))  # nothing half-built is taken for a build


def test_stopping_leaves_no_process_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    procs = controlplane.procs
    monkeypatch.setattr(procs, "STOP_GRACE", 0.5)  # the stubborn one is SIGKILLed after it
    # A leader that ignores SIGTERM and a child of its own: both must go.
    script = "trap '' TERM; sleep 300 & sleep 300; wait"
    procs.start(tmp_path, "stubborn", ["sh", "-c", script])
    procs.start(tmp_path, "plain", ["sleep", "300"])
    assert procs.alive(tmp_path, "stubborn") and procs.alive(tmp_path, "plain")
    # the leader, its two sleeps and the plain sleep, once the shell has forked
    eventually("every process started", lambda: len(procs.leftovers(tmp_path)) == 4)
    stopped = procs.stop_all(tmp_path, ("plain",))
    assert stopped == ["plain", "stubborn"]
    assert procs.leftovers(tmp_path) == []
    assert not (tmp_path / "pids").exists() or not list((tmp_path / "pids").iterdir())


def test_without_root_the_real_node_says_so_and_cluster_up_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    from localcluster import node

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    why = node.unavailable()
    assert why is not None and "needs root" in why
    with pytest.raises(controlplane.ClusterError, match="needs root"):
        controlplane._start(Path("/nonexistent-state"), {}, None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("folder", ["team,repo", "team:repo", "team repo"])
def test_a_state_folder_the_node_cannot_run_from_is_refused_before_anything_starts(
    folder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A comma, a colon or whitespace in the state folder's path: refused by name before any build or process."""
    from localcluster import node

    monkeypatch.setattr(node, "unavailable", lambda: None)  # as root, on a machine that can run the node
    monkeypatch.setattr(controlplane, "build", lambda: pytest.fail("built before the state folder was checked"))
    with pytest.raises(controlplane.ClusterError, match="KFCHAOS_CLUSTER_DIR to a folder without one"):
        controlplane.up(tmp_path / folder / ".cluster")
    assert not (tmp_path / folder).exists()


def test_a_deep_state_folder_keeps_every_socket_short(tmp_path: Path) -> None:
    """However deep the checkout, every socket the cluster's programs listen on fits a unix socket's path."""
    from localcluster import shortpaths

    deep = tmp_path.joinpath(*["a-folder-of-some-depth"] * 12, ".cluster")
    assert shortpaths.state_problem(deep) is None
    for socket_path in shortpaths.sockets(deep):
        assert len(str(socket_path).encode()) <= shortpaths.MAX_SOCKET_PATH
        assert not str(socket_path).startswith(str(tmp_path))
    assert shortpaths.socket_dir(deep) != shortpaths.socket_dir(tmp_path / ".cluster")  # two checkouts keep apart


def test_a_second_image_build_does_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With the node's images built, building them again calls neither mmdebstrap nor umoci nor tar nor pip: a PATH
    holding only git (which names the working tree's files) and a pip that cannot run still answer the same archive."""
    from localcluster import images

    try:
        bins = controlplane.build()
        first = images.build(ROOT, ROOT / ".venv" / "bin" / "pip", bins)
    except (images.ImageError, controlplane.ClusterError) as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the node's images cannot be built here: {error}")
        pytest.skip(f"the node's images cannot be built here: {error}")
    only_git = tmp_path / "bin"
    only_git.mkdir()
    (only_git / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(only_git))
    again = images.build(ROOT, Path("/bin/false"), bins)
    assert again == first and again.archive.is_file()


def test_the_image_cache_keeps_the_most_recently_used_entries_of_each_kind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every change to the sources keys a new component layer and archive: unpruned, they filled CI's disk (mariadb's
    install then failed with ENOSPC). A new entry prunes its own kind to KEEP_PER_KIND, the most recently used kept
    (a cache hit counts as a use); other kinds and files that are no cache entry are left alone."""
    from localcluster import images

    monkeypatch.setenv("KFCHAOS_CACHE", str(tmp_path))
    cache = images.cache_dir()
    cache.mkdir(parents=True)
    olds = [cache / f"component-{index:012x}.tar" for index in range(5)]
    for age, entry in enumerate(olds):
        entry.write_bytes(b"layer")
        os.utime(entry, (1_000_000 - age * 100, 1_000_000 - age * 100))  # olds[0] is the newest
    images._used(olds[4])  # the oldest, used again just now
    archive = cache / "node-images-aaaaaaaaaaaa.tar"
    archive.write_bytes(b"archive")
    os.utime(archive, (1, 1))
    wheels = cache / "wheels-bbbbbbbbbbbb"
    wheels.mkdir()
    (cache / "notes.txt").write_text("not an entry")
    new = cache / "component-ffffffffffff.tar"
    new.write_bytes(b"layer")

    assert images._prune(new) == new

    kept = sorted(entry.name for entry in cache.iterdir())
    assert kept == sorted([new.name, olds[4].name, olds[0].name, archive.name, wheels.name, "notes.txt"]), (
        "the new entry and the two most recently used other components stay; nothing of another kind goes"
    )
    with pytest.raises(images.ImageError, match="not a cache entry"):
        images._prune(cache / "notes.txt")
