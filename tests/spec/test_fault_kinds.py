"""The table of fault kinds (kfchaos.faultspec.kinds) and the tables derived from it or checked against it."""

from __future__ import annotations

import pytest

from kfchaos.demo.faults.local_backend import LOCAL_FAULT_TYPES
from kfchaos.demo.faults.proxy import PROXY_FAULT_TYPES
from kfchaos.faults.catalog import CATALOG
from kfchaos.faults.render import _SPEC_BUILDERS
from kfchaos.faultspec.kinds import BY_NAME, KINDS, PARAMS_BY_TYPE, TRAFFIC_SIDE_TYPES, check_covers, check_known
from kfchaos.spec import FAULT_MODELS
from kfchaos.traffic.trafficfaults.table import GENERATORS
from kfchaos.verdict.delivery import LOAD_FAULTS, REQUEST_FAULTS


def test_every_kind_is_performed_by_exactly_one_side() -> None:
    for kind in KINDS:
        built, generated, pod = kind.name in _SPEC_BUILDERS, kind.name in GENERATORS, kind.side == "pod"
        assert [built, generated, pod].count(True) == 1, kind
        assert (kind.side == "chaos-mesh") == built and (kind.side == "traffic") == generated, kind
        assert (kind.chaos_kind is None) == (kind.side == "traffic"), kind


def test_the_derived_tables_say_what_the_rows_say() -> None:
    assert set(FAULT_MODELS) == set(PARAMS_BY_TYPE) == set(BY_NAME)
    for name, entry in CATALOG.items():
        kind = BY_NAME[name]
        assert (entry.kind, entry.action, entry.one_shot) == (kind.chaos_kind, kind.action, kind.one_shot)
    assert set(CATALOG) | TRAFFIC_SIDE_TYPES == set(BY_NAME)
    assert LOAD_FAULTS <= REQUEST_FAULTS <= TRAFFIC_SIDE_TYPES
    # what the verdict judged before the table, unchanged
    assert {"long-context-burst", "tokenizer-stress", "batch-shock", "prefix-cache-thrash",
                              "client-abort-storm"} == REQUEST_FAULTS  # fmt: skip
    assert {"long-context-burst", "batch-shock", "prefix-cache-thrash"} == LOAD_FAULTS


def test_the_demos_kinds_are_kinds() -> None:
    check_known("local", LOCAL_FAULT_TYPES)
    check_known("proxy", PROXY_FAULT_TYPES)  # the proxy imports nothing of kfchaos, so it is checked here


def test_a_table_that_misses_or_invents_a_kind_is_refused() -> None:
    with pytest.raises(AssertionError, match=r"missing \['pod-kill'\]"):
        check_covers("t", set(CATALOG) - {"pod-kill"}, CATALOG)
    with pytest.raises(AssertionError, match=r"unknown \['pod-explode'\]"):
        check_covers("t", {*CATALOG, "pod-explode"}, CATALOG)
    with pytest.raises(AssertionError, match="not fault kinds"):
        check_known("t", ["pod-explode"])
