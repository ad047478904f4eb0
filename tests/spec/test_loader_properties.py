"""Property: whatever the loader is fed, the outcome is a valid Experiment or a SpecError -- nothing else."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfchaos.errors import SpecError
from kfchaos.spec import Experiment
from kfchaos.validate import parse_experiment
from tests.conftest import EXPERIMENTS
from tests.support.documents import document_paths

SEEDS = [yaml.safe_load(p.read_text()) for p in sorted(EXPERIMENTS.glob("*.yaml"))]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["20m", "200ms", "15%", "0.001%", "-1s", "1e9h", "kube-system", "", "all", "fixed", "100%"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    import copy

    document = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = document_paths(document)
        path = draw(st.sampled_from(paths))
        if not path:
            document = draw(values) if draw(st.integers(0, 9)) == 0 else document
            continue
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(values)
        else:
            parent.append(draw(values))
    return document


def _outcome(text: str | bytes) -> None:
    try:
        result = parse_experiment(text, "gen.yaml")
    except SpecError as exc:
        assert exc.problems, "a SpecError must carry at least one problem"
        for problem in exc.problems:
            assert problem.line >= 1
            assert str(problem).startswith("gen.yaml:")
        return
    assert isinstance(result, Experiment)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_documents())
def test_mutated_documents_validate_or_raise_spec_error(document: Any) -> None:
    try:
        text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return
    _outcome(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_spec_error_only(data: bytes) -> None:
    _outcome(data)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#%@` \n\t?,0")), max_size=80))
def test_yaml_punctuation_soup_raises_spec_error_only(text: str) -> None:
    _outcome(text)


def test_unmutated_seeds_are_valid() -> None:
    for seed in SEEDS:
        _outcome(yaml.safe_dump(seed))
