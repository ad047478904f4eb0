"""The contract scenarios (tests/contract/scenarios.py) against the real kube-apiserver, KWOK and Chaos Mesh's
controller-manager (issue 21 §4): the same functions tests/contract/test_fake.py runs against the loopback fake,
so a fake that drifts from the real components fails one of the two. Where they differed, the real outcome is
the one kept (docs/cluster.md, "What the real components showed").

Each test gets its own namespace; pods are bare pods that kube-scheduler places on the KWOK nodes and KWOK runs.

The stall hook makes Chaos Mesh's recovery fail while its controller keeps running, as on a node whose
chaos-daemon is gone: a ValidatingAdmissionPolicy refuses the controller's own updates of the target pods, so
pod-failure's Recover (controllers/chaosimpl/podchaos/podfailure/impl.go, which restores the image with an
update of the pod) returns an error, the records step asks to requeue and the object stays Terminating.
Stopping the controller instead would also stop its webhooks, whose failure policy (Fail) then refuses every
update of a chaos object, the remedies included: that is a different case (a controller that is down), which
`kfchaos doctor` reports.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kfchaos.faults.chaosrecords import parse_records
from tests.cluster.conftest import RealCluster
from tests.cluster.test_smoke import ensure_namespace
from tests.contract import scenarios

pytestmark = pytest.mark.cluster

# The identity cluster-up gives the controller-manager (scripts/cluster/localcluster/controlplane.py,
# component_kubeconfig("chaos-controller-manager", "chaos-controller-manager", ...): the certificate's CN).
CONTROLLER_USER = "chaos-controller-manager"
POLICY_GROUP = "admissionregistration.k8s.io"


def _impersonating(real_cluster: RealCluster, user: str) -> k8s.ApiClient:
    api = real_cluster.api_client()
    # The admin (system:masters) may impersonate; the group keeps the controller's own permissions.
    api.set_default_header("Impersonate-User", user)
    api.set_default_header("Impersonate-Group", "system:masters")
    return api


def stall_recovery_with_policy(real_cluster: RealCluster) -> Callable[[str, str], Callable[[], None]]:
    """The real cluster's `Cluster.stall_recovery`: refuse the controller's updates of every pod the chaos object
    recorded; returns what lifts the refusal."""
    admin = real_cluster.api_client()
    custom = k8s.CustomObjectsApi(admin)

    def stall(namespace: str, name: str) -> Callable[[], None]:
        obj = custom.get_namespaced_custom_object("chaos-mesh.org", "v1alpha1", namespace, "podchaos", name)
        pods = [r.target.split("/")[1] for r in parse_records(obj)]
        policy = f"kfchaos-stall-{uuid.uuid4().hex[:6]}"
        names = ", ".join(f"'{p}'" for p in pods)
        # CEL on the admission request (kubernetes/kubernetes, staging/src/k8s.io/apiserver/pkg/admission/plugin/
        # policy/validating): refuse only the controller's own updates of the recorded pods in this namespace.
        body = {
            "apiVersion": f"{POLICY_GROUP}/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
                    ]
                },
                "validations": [
                    {
                        "expression": f"request.userInfo.username != '{CONTROLLER_USER}' || "
                        f"request.namespace != '{namespace}' || !(request.name in [{names}])",
                        "message": "kfchaos contract test: chaos-daemon gone, recovery cannot complete",
                    }
                ],
            },
        }
        binding = {
            "apiVersion": f"{POLICY_GROUP}/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"]},
        }
        custom.create_cluster_custom_object(POLICY_GROUP, "v1", "validatingadmissionpolicies", body)
        custom.create_cluster_custom_object(POLICY_GROUP, "v1", "validatingadmissionpolicybindings", binding)

        def lift() -> None:
            for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
                try:
                    custom.delete_cluster_custom_object(POLICY_GROUP, "v1", plural, policy)
                except ApiException as error:
                    if error.status != 404:
                        raise

        # The policy is in force once the API server refuses such an update (its policy informer lags the
        # create): probe with a dry-run update as the controller, which changes nothing.
        as_controller = k8s.CoreV1Api(_impersonating(real_cluster, CONTROLLER_USER))

        def refused() -> bool:
            try:
                as_controller.patch_namespaced_pod(
                    pods[0], namespace, {"metadata": {"labels": {"kfchaos-probe": "1"}}}, dry_run="All"
                )
            except ApiException as error:
                if error.status in (403, 422) and "recovery cannot complete" in str(error.body):
                    return True
                raise
            return False

        try:
            scenarios._wait("the stall policy in force", refused)
        except BaseException:
            lift()
            raise
        return lift

    return stall


@pytest.fixture
def cluster(real_cluster: RealCluster) -> Iterator[scenarios.Cluster]:
    namespace = ensure_namespace(real_cluster, f"contract-{uuid.uuid4().hex[:6]}")
    yield scenarios.Cluster(
        api=real_cluster.api_client(),
        namespace=namespace,
        # bare pods: kube-scheduler places them on the untainted KWOK nodes, KWOK reports them Running
        pod_spec={},
        stall_recovery=stall_recovery_with_policy(real_cluster),
        poll=0.2,
    )
    k8s.CoreV1Api(real_cluster.api_client()).delete_namespace(namespace)


def test_pick_once_after_pod_replacement(cluster: scenarios.Cluster) -> None:
    scenarios.pick_once_after_pod_replacement(cluster)


def test_pod_kill_records_the_killed_pod(cluster: scenarios.Cluster) -> None:
    scenarios.pod_kill_records_the_killed_pod(cluster)


def test_pick_once_same_name_replacement(cluster: scenarios.Cluster) -> None:
    scenarios.pick_once_same_name_replacement(cluster)


def test_container_records_first_container(cluster: scenarios.Cluster) -> None:
    scenarios.container_records_first_container(cluster)


def test_finalizer_added_after_create(cluster: scenarios.Cluster) -> None:
    scenarios.finalizer_added_after_create(cluster)


def test_finalizer_stuck_then_released(cluster: scenarios.Cluster) -> None:
    scenarios.finalizer_stuck_then_released(cluster)


def test_never_injected_stays_terminating(cluster: scenarios.Cluster) -> None:
    # The bare pod lands on a KWOK node, where no chaos-daemon runs (it runs on the real node only).
    scenarios.never_injected_stays_terminating(cluster)


def test_admission_agreement(cluster: scenarios.Cluster) -> None:
    assert scenarios.admission_agreement(cluster) == len(scenarios.ADMISSION_CASES)


def test_admission_agreement_on_rendered_faults_and_the_fuzz_corpus(cluster: scenarios.Cluster) -> None:
    cases = scenarios.rendered_cases() + scenarios.fuzz_cases(seed=0, count=300)
    assert scenarios.admission_agreement(cluster, cases) == len(cases)
