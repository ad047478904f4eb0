"""The Kubernetes side of `kfchaos doctor`: the run identity's permissions (SubjectAccessReview), Chaos Mesh,
the target namespace and pods, and the target Secret where the task pods run. Every call is a read, an
access review or a server-side dry run (which persists nothing); every call has a timeout."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Any

from kfchaos.doctor import kfpcheck
from kfchaos.doctor.model import Report, Status
from kfchaos.kfp.identity import RUN_CALLS, Call
from kfchaos.spec import Experiment
from kfchaos.targetauth import TARGET_SECRET, TARGET_SECRET_KEY

TIMEOUT = 10.0
# Chaos Mesh's Helm chart names its controller Deployment so (helm/chaos-mesh/templates/
# controller-manager-deployment.yaml); its image tag is the release.
CONTROLLER = "chaos-controller-manager"
SUPPORTED_CHAOS_MESH = ((2, 7, 0), (3, 0, 0))  # the CRDs kfchaos renders against are 2.7's (data/chaos-mesh)
ARGOCD_SYNC_OPTIONS = "argocd.argoproj.io/sync-options"


def _status_of(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


def _apis(api_client: Any) -> Any:
    import kubernetes.client as k

    class Apis:
        core = k.CoreV1Api(api_client)
        apps = k.AppsV1Api(api_client)
        auth = k.AuthorizationV1Api(api_client)
        ext = k.ApiextensionsV1Api(api_client)
        custom = k.CustomObjectsApi(api_client)

    return Apis


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def _scope_namespaces(experiment: Experiment, kfp_namespace: str) -> dict[str, list[str]]:
    targets = sorted({experiment.fault_namespace(f) for f in experiment.spec.faults if f.cluster_side})
    return {"kfp": [kfp_namespace], "target": targets, "cluster": [""]}


def check_identity(report: Report, api_client: Any, kfp_namespace: str, service_account: str) -> None:
    """The ServiceAccount exists where the run's pods are created: RBAC answers access reviews for any name,
    existing or not, but the workflow's pods cannot be created for a missing one."""
    name = "run identity"
    try:
        _apis(api_client).core.read_namespaced_service_account(service_account, kfp_namespace, _request_timeout=TIMEOUT)
    except Exception as exc:
        if _status_of(exc) == 404:
            report.add(name, Status.FAIL, f"no ServiceAccount {kfp_namespace}/{service_account}",
                       "kubectl apply -k manifests/ (manifests/base/serviceaccount.yaml)")  # fmt: skip
        else:
            report.add(name, Status.UNKNOWN, f"cannot read {kfp_namespace}/{service_account}: {_brief(exc)}", "")
        return
    report.add(name, Status.PASS, f"ServiceAccount {kfp_namespace}/{service_account}: the whole run executes as it")


def check_permissions(
    report: Report, api_client: Any, experiment: Experiment, kfp_namespace: str, service_account: str
) -> None:
    """One SubjectAccessReview per call a run makes, as the run identity; one row per namespace."""
    import kubernetes.client as k

    apis = _apis(api_client)
    user = service_account_user(kfp_namespace, service_account)
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{kfp_namespace}", "system:authenticated"]
    scopes = _scope_namespaces(experiment, kfp_namespace)
    label = {"kfp": "KFP runtime", "target": "faults", "cluster": "cluster-wide"}
    for scope in ("kfp", "target", "cluster"):
        calls = [c for c in RUN_CALLS if c.scope == scope]
        for namespace in scopes[scope]:
            name = f"permissions {namespace or 'cluster'} ({label[scope]})"
            denied: list[Call] = []
            try:
                for call in calls:
                    review = k.V1SubjectAccessReview(
                        spec=k.V1SubjectAccessReviewSpec(
                            user=user,
                            groups=groups,
                            resource_attributes=k.V1ResourceAttributes(
                                verb=call.verb,
                                group=call.group,
                                resource=call.resource,
                                namespace=namespace or None,
                                name=call.name or None,
                            ),
                        )
                    )
                    answer = apis.auth.create_subject_access_review(review, _request_timeout=TIMEOUT)
                    if not (answer.status and answer.status.allowed):
                        denied.append(call)
            except Exception as exc:
                report.add(
                    name,
                    Status.UNKNOWN,
                    f"cannot review access as {user}: {_brief(exc)}",
                    "run doctor as someone who may create subjectaccessreviews (e.g. cluster-admin), or check "
                    f"by hand: kubectl auth can-i --list --as={user} -n {namespace or 'default'}",
                )
                continue
            if denied:
                where = "manifests/base (KFP runtime)" if scope == "kfp" else f"manifests/overlays/{namespace}"
                report.add(
                    name,
                    Status.FAIL,
                    f"{user} may not: " + ", ".join(c.describe() for c in denied),
                    f"kubectl apply -k manifests/ (with {where}); runs must use --service-account {service_account}",
                )
            else:
                report.add(name, Status.PASS, f"{len(calls)} calls allowed for {user}")


def _brief(exc: Exception) -> str:
    status = _status_of(exc)
    reason = getattr(exc, "reason", None)
    text = f"HTTP {status} {reason}" if status else type(exc).__name__
    return text[:200]


def check_chaos_mesh(report: Report, api_client: Any, kinds: Iterable[str], chaos_namespace: str) -> None:
    """The CRDs of the kinds this experiment renders, and the controller's release."""
    apis = _apis(api_client)
    missing = []
    try:
        for plural in sorted(set(kinds)):
            try:
                apis.ext.read_custom_resource_definition(f"{plural}.chaos-mesh.org", _request_timeout=TIMEOUT)
            except Exception as exc:
                if _status_of(exc) != 404:
                    raise
                missing.append(plural)
    except Exception as exc:
        report.add("chaos mesh installed", Status.UNKNOWN, f"cannot read CRDs: {_brief(exc)}", "check kube access")
    else:
        if missing:
            report.add(
                "chaos mesh installed",
                Status.FAIL,
                "no CRD for " + ", ".join(missing),
                "helm install chaos-mesh chaos-mesh/chaos-mesh -n chaos-mesh --create-namespace --version 2.7.2",
            )
        else:
            report.add("chaos mesh installed", Status.PASS, "CRDs present: " + (", ".join(sorted(set(kinds))) or "-"))
    try:
        deployment = apis.apps.read_namespaced_deployment(CONTROLLER, chaos_namespace, _request_timeout=TIMEOUT)
    except Exception as exc:
        report.add(
            "chaos mesh version",
            Status.UNKNOWN if _status_of(exc) != 404 else Status.FAIL,
            f"deployment {chaos_namespace}/{CONTROLLER}: {_brief(exc)}",
            "install Chaos Mesh 2.7 with its Helm chart, or give --chaos-namespace",
        )
        return
    images = [c.image for c in deployment.spec.template.spec.containers or []]
    tag = images[0].rpartition(":")[2] if images and ":" in images[0] else ""
    version = kfpcheck.parse_version(tag)
    low, high = SUPPORTED_CHAOS_MESH
    if version is None:
        report.add("chaos mesh version", Status.UNKNOWN, f"cannot read a release from {images}", "use a 2.7 release")
    elif low <= version < high:
        report.add("chaos mesh version", Status.PASS, f"{kfpcheck.show(version)} (supported: 2.7.x)")
    else:
        report.add(
            "chaos mesh version",
            Status.FAIL,
            f"{kfpcheck.show(version)}; kfchaos renders against Chaos Mesh 2.7's CRDs",
            "helm upgrade chaos-mesh chaos-mesh/chaos-mesh --version 2.7.2",
        )


def _answer(exc: Exception) -> str:
    """The API server's message of a refused request (its Status body), else the exception in brief."""
    try:
        message = json.loads(getattr(exc, "body", None) or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or _brief(exc))[:400]


def check_chaos_mesh_admission(
    report: Report, api_client: Any, manifests: Iterable[dict[str, Any]], chaos_namespace: str
) -> None:
    """Each chaos object the experiment renders, created with server-side dry run: the API server sends it
    through Chaos Mesh's mutating and validating webhooks (the chart registers them with sideEffects: None,
    helm/chaos-mesh/templates/mutating-admission-webhooks.yaml and validating-admission-webhooks.yaml, so dry
    runs reach them) and persists nothing. The webhooks are served by the chaos-controller-manager process
    itself (cmd/chaos-controller-manager), with the chart's failurePolicy Fail: when the controller is stopped
    every create is refused ("failed calling webhook"), which its Deployment object alone does not show."""
    name = "chaos mesh admission"
    stopped_fix = (
        "the chaos-controller-manager serves the webhooks: check its pods and logs "
        f"(kubectl -n {chaos_namespace} get pods -l app.kubernetes.io/component=controller-manager)"
    )
    for manifest in manifests:
        group, _, version = str(manifest["apiVersion"]).partition("/")
        meta = manifest["metadata"]
        what = f"{manifest['kind']} {meta['namespace']}/{meta['name']}"
        plural = str(manifest["kind"]).lower()
        try:
            _apis(api_client).custom.create_namespaced_custom_object(
                group, version, meta["namespace"], plural, manifest, dry_run="All", _request_timeout=TIMEOUT
            )
        except Exception as exc:
            answer = _answer(exc)
            if "failed calling webhook" in answer:
                report.add(name, Status.FAIL, f"{what}: Chaos Mesh's webhook does not answer: {answer}", stopped_fix)
            elif _status_of(exc) in (400, 422) and "denied the request" in answer:
                fix = "fix the fault in the experiment (kfchaos validate)"
                report.add(name, Status.FAIL, f"{what} refused by Chaos Mesh's admission: {answer}", fix)
            else:
                fix = "see the permission and CRD checks"
                report.add(name, Status.UNKNOWN, f"{what}: dry run not answered: {answer}", fix)
            return
    report.add(name, Status.PASS, "every chaos object admitted by Chaos Mesh's webhooks (server-side dry run)")


def target_pods(api_client: Any, experiment: Experiment) -> list[Any]:
    labels = experiment.spec.target.selector.labels
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    pods = _apis(api_client).core.list_namespaced_pod(
        experiment.spec.target.namespace, label_selector=selector or None, _request_timeout=TIMEOUT
    )
    return list(pods.items or [])


def check_target(report: Report, api_client: Any, experiment: Experiment) -> list[Any]:
    """The target pods exist; the namespace is not one Argo CD may prune. Returns the pods."""
    namespace = experiment.spec.target.namespace
    pods: list[Any] = []
    try:
        pods = target_pods(api_client, experiment)
    except Exception as exc:
        report.add("target pods", Status.UNKNOWN, f"cannot list pods in {namespace}: {_brief(exc)}", "check access")
    else:
        if pods:
            report.add("target pods", Status.PASS, f"{len(pods)} pod(s) in {namespace} match the selector")
        else:
            report.add("target pods", Status.FAIL, f"no pod in {namespace} matches spec.target.selector",
                       "fix spec.target.selector or deploy the target")  # fmt: skip
    try:
        ns = _apis(api_client).core.read_namespace(namespace, _request_timeout=TIMEOUT)
    except Exception as exc:
        report.add("argo cd prune", Status.UNKNOWN, f"cannot read namespace {namespace}: {_brief(exc)}", "")
        return pods
    problem = argocd_prune_problem(ns.metadata.labels or {}, ns.metadata.annotations or {})
    if problem:
        report.add(
            "argo cd prune",
            Status.FAIL,
            f"namespace {namespace}: {problem}",
            f"annotate it {ARGOCD_SYNC_OPTIONS}=Prune=false,Delete=false (manifests/target-namespace does)",
        )
    else:
        report.add("argo cd prune", Status.PASS, f"Argo CD will not delete namespace {namespace}")
    return pods


def argocd_prune_problem(labels: dict[str, str], annotations: dict[str, str]) -> str:
    """Why Argo CD could delete this namespace, or "". Argo CD tracks what it manages by the label
    `app.kubernetes.io/instance` or the annotation `argocd.argoproj.io/tracking-id` (docs/user-guide/
    resource_tracking.md); a tracked resource is pruned unless its sync-options say Prune=false and deleted
    with the Application unless Delete=false (docs/user-guide/sync-options.md)."""
    tracked = "argocd.argoproj.io/tracking-id" in annotations or "app.kubernetes.io/instance" in labels
    if not tracked:
        return ""
    options = {o.strip() for o in re.split(r",", annotations.get(ARGOCD_SYNC_OPTIONS, "")) if o.strip()}
    lacking = [o for o in ("Prune=false", "Delete=false") if o not in options]
    if not lacking:
        return ""
    return "managed by an Argo CD Application without " + " and ".join(lacking)


def check_secret(
    report: Report,
    api_client: Any,
    experiment: Experiment,
    pipeline_documents: list[Any],
    kfp_namespace: str,
    backend: kfpcheck.Version | None,
) -> None:
    """The target Secret where the task pods run (the KFP namespace, not the target's)."""
    name = "target secret"
    if not kfpcheck.secrets_as_env(pipeline_documents):
        report.add(name, Status.PASS, "the pipeline mounts no Secret (spec.target.auth unset)")
        return
    auth = experiment.spec.target.auth
    create = f"kubectl -n {kfp_namespace} create secret generic {TARGET_SECRET} --from-literal={TARGET_SECRET_KEY}=..."
    try:
        secret = _apis(api_client).core.read_namespaced_secret(TARGET_SECRET, kfp_namespace, _request_timeout=TIMEOUT)
    except Exception as exc:
        if _status_of(exc) != 404:
            report.add(name, Status.UNKNOWN, f"cannot read {kfp_namespace}/{TARGET_SECRET}: {_brief(exc)}", create)
            return
        secret = None
    if secret is None:
        optional_ok = backend is not None and backend >= kfpcheck.OPTIONAL_SECRET.minimum
        if auth is None and optional_ok:
            report.add(name, Status.PASS, f"{TARGET_SECRET} absent; optional on this backend and no auth used")
            return
        why = (
            f"spec.target.auth needs it: without it {auth.env} is empty and the run stops at steady state"
            if auth is not None
            else "KFP backends before 2.15 make it required: every task would sit in CreateContainerConfigError"
        )
        report.add(name, Status.FAIL, f"Secret {kfp_namespace}/{TARGET_SECRET} missing ({why})", create)
        return
    raw = (secret.data or {}).get(TARGET_SECRET_KEY, "")
    try:
        token = base64.b64decode(raw, validate=True) if raw else b""
    except ValueError:
        token = b""
    if auth is not None and not token.strip():
        report.add(name, Status.FAIL, f"Secret {kfp_namespace}/{TARGET_SECRET} has no non-empty key "
                   f"{TARGET_SECRET_KEY!r}", create)  # fmt: skip
        return
    report.add(name, Status.PASS, f"Secret {kfp_namespace}/{TARGET_SECRET} present where the task pods run")


def check_chaos_mesh_placement(report: Report, api_client: Any, experiment: Experiment, pods: list[Any]) -> None:
    """chaos-daemon on the target pods' nodes and the namespace filter annotation: the rules live in
    kfchaos.faults.clustercheck (one place, shared with preflight)."""
    from kfchaos.faults import clustercheck

    try:
        rows = list(clustercheck.doctor_checks(api_client, experiment, pods))
    except Exception as exc:
        fix = "run doctor with an identity that may list pods, daemonsets and deployments cluster-wide"
        report.add("chaos mesh placement", Status.UNKNOWN, f"cannot read the placement: {_brief(exc)}", fix)
        return
    for check_name, passed, detail, fix in rows:
        report.add(check_name, Status.PASS if passed else Status.FAIL, detail, fix)
