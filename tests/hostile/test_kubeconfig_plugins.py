"""A kubeconfig's credential plugin (`exec`, `auth-provider`) runs only from the user's own kubeconfig
(kfchaos.kubeconnect.check_credential_plugins).

The plugin is a real program the kubernetes client would run: it leaves a mark, and prints an ExecCredential whose
token the loopback API server takes. From the user's own kubeconfig it runs and `cleanup` works; from one in a run
folder, one others may write, or one another user owns, kfchaos refuses before the client reads it: no mark.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from tests.conftest import ROOT
from tests.support.kubeapi import KubeApiServer


def _plugin(folder: Path, mark: Path) -> Path:
    script = folder / "credential-plugin.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "from-the-plugin"},
    }
    script.write_text(
        f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\nprint({json.dumps(credential)!r})\n"
    )
    return script


def _kubeconfig(path: Path, server: str, user: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


def _exec(script: Path) -> dict[str, object]:
    return {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable, "args": [str(script)]}
    }


def _cleanup(kubeconfig: Path) -> int:
    return main(["cleanup", "--run-id", "run-x", "--kubeconfig", str(kubeconfig)])


@pytest.fixture
def server() -> object:
    with KubeApiServer() as api:
        yield api


def test_the_users_own_kubeconfig_runs_its_plugin(tmp_path: Path, server: KubeApiServer) -> None:
    mark = tmp_path / "ran"
    home = tmp_path / "home" / ".kube"
    home.mkdir(parents=True, mode=0o700)
    kubeconfig = _kubeconfig(home / "config", server.url, _exec(_plugin(tmp_path, mark)))
    assert _cleanup(kubeconfig) == 0
    assert mark.read_text() == "ran"  # the plugin is real: the client ran it


@pytest.mark.parametrize("where", ["run folder", "writable by others", "another user's"])
def test_a_kubeconfig_that_is_not_the_users_own_never_runs_its_plugin(
    where: str, tmp_path: Path, server: KubeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    mark = tmp_path / "ran"
    script = _plugin(tmp_path, mark)
    if where == "run folder":
        folder = tmp_path / "runs" / "run-1"
        folder.mkdir(parents=True)
        for name in ("run.json", "seal.json"):
            (folder / name).write_text("{}")
        kubeconfig = _kubeconfig(folder / "kubeconfig", server.url, _exec(script))
        why = f"it lies in the kfchaos run folder {folder}"
    elif where == "writable by others":
        kubeconfig = _kubeconfig(tmp_path / "shared" / "kubeconfig", server.url, _exec(script))
        kubeconfig.chmod(0o666)
        why = "the file may be written by others (mode 666)"
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give a file to another user")
        kubeconfig = _kubeconfig(tmp_path / "theirs" / "kubeconfig", server.url, _exec(script))
        os.chown(kubeconfig, 4242, 4242)
        why = "the file belongs to user id 4242"
    assert _cleanup(kubeconfig) == 3
    error = capsys.readouterr().err
    assert "user 'u' runs exec" in error and why in error
    assert not mark.exists(), "the plugin ran"


def test_an_auth_provider_is_held_to_the_same_rule(
    tmp_path: Path, server: KubeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    mark = tmp_path / "ran"
    provider = {"auth-provider": {"name": "gcp", "config": {"cmd-path": str(_plugin(tmp_path, mark))}}}
    kubeconfig = _kubeconfig(tmp_path / "shared" / "kubeconfig", server.url, provider)
    kubeconfig.chmod(0o646)
    assert _cleanup(kubeconfig) == 3
    assert "user 'u' runs auth-provider" in capsys.readouterr().err and not mark.exists()


def test_no_experiment_and_no_pipeline_parameter_can_name_a_kubeconfig(tmp_path: Path) -> None:
    # The experiment format is strict (an unknown field is refused), and no compiled pipeline takes one.
    from kfchaos.errors import SpecError
    from kfchaos.validate import parse_experiment

    text = (ROOT / "experiments" / "vllm-network-delay.yaml").read_text()
    hostile = text.replace("spec:\n", "spec:\n  kubeconfig: /tmp/theirs\n", 1)
    with pytest.raises(SpecError, match="kubeconfig"):
        parse_experiment(hostile, "hostile.yaml")
    for compiled in (ROOT / "pipelines" / "compiled").rglob("*.yaml"):
        assert "kubeconfig" not in compiled.read_text().lower(), compiled
    assert stat.S_ISDIR((ROOT / "pipelines" / "compiled").stat().st_mode)
