"""Kubernetes RBAC evaluation over a list of Role/ClusterRole/RoleBinding/ClusterRoleBinding objects, as the
API server's RBAC authorizer decides: the loopback API server answers SubjectAccessReviews with it, and
tests/manifests/test_rbac.py checks the run identity's permissions with it.

Rules followed (kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go and
pkg/apis/rbac/v1/evaluation_helpers.go):
- a RoleBinding grants only in its own namespace; its roleRef is a Role of that namespace or a ClusterRole;
  a ClusterRoleBinding grants its ClusterRole everywhere, cluster-scoped resources included;
- a ServiceAccount subject is the user `system:serviceaccount:<namespace>:<name>` (namespace defaulting to
  the binding's); Group and User subjects match the request's groups and user;
- verbs, apiGroups and resources match exactly or by `*`; a subresource is matched as `resource/sub`;
  resourceNames, when present, match only requests that name one of them (never list or create);
- RBAC only allows: a request no rule allows is denied with an empty reason (rbac.go returns DecisionNoOpinion),
  and the allowing reason names the binding, its role and the subject, as rbac.go's `ruleAccumulator` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def service_account_user(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> list[str]:
    """The groups the API server's token authenticator gives a service account (k8s.io/apiserver
    pkg/authentication/serviceaccount/util.go MakeGroupNames), plus system:authenticated."""
    return ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]


@dataclass(frozen=True)
class Attributes:
    """authorization.k8s.io/v1 ResourceAttributes (the fields RBAC reads)."""

    verb: str
    group: str = ""
    resource: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""


def _rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.group not in groups:
        return False
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    resources = rule.get("resources") or []
    resource_ok = any(
        r == "*" or r == combined or (attrs.subresource and r == f"*/{attrs.subresource}") for r in resources
    )
    if not resource_ok:
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _subject_matches(subject: dict[str, Any], binding_namespace: str, user: str, groups: Iterable[str]) -> bool:
    kind = subject.get("kind")
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user == service_account_user(namespace, subject.get("name", ""))
    if kind == "User":
        return user == subject.get("name")
    if kind == "Group":
        return subject.get("name") in set(groups)
    return False


class RbacAuthorizer:
    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self.objects = [o for o in objects if isinstance(o, dict)]

    def _role(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        for obj in self.objects:
            meta = obj.get("metadata", {})
            if obj.get("kind") != kind or meta.get("name") != name:
                continue
            if kind == "Role" and meta.get("namespace") != namespace:
                continue
            return obj
        return None

    def authorize(self, user: str, groups: Iterable[str], attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason)."""
        groups = list(groups)
        for binding in self.objects:
            kind = binding.get("kind")
            meta = binding.get("metadata", {})
            if kind == "RoleBinding":
                namespace = meta.get("namespace", "")
                if not attrs.namespace or attrs.namespace != namespace:
                    continue
            elif kind == "ClusterRoleBinding":
                namespace = ""
            else:
                continue
            subjects = [s for s in binding.get("subjects") or [] if _subject_matches(s, namespace, user, groups)]
            if not subjects:
                continue
            ref = binding.get("roleRef", {})
            role = self._role(ref.get("kind", ""), ref.get("name", ""), namespace)
            if role is None:
                continue  # a binding to a missing role grants nothing (rbac.go logs and skips it)
            for rule in role.get("rules") or []:
                if _rule_allows(rule, attrs):
                    subject = subjects[0]
                    where = f"{meta.get('name')}/{namespace}" if namespace else str(meta.get("name"))
                    who = (
                        f'{subject["kind"]} "{subject.get("name")}/{subject.get("namespace") or namespace}"'
                        if subject["kind"] == "ServiceAccount"
                        else f'{subject["kind"]} "{subject.get("name")}"'
                    )
                    return True, f'RBAC: allowed by {kind} "{where}" of {ref["kind"]} "{ref["name"]}" to {who}'
        return False, ""
