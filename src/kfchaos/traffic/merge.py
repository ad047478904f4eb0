"""One stage from its shards: the plan hash of the whole stage, and the shard record files merged into one.

A stage replayed as n shards (`--shard i/n`, kfchaos.traffic.sampling) sends the same requests as one replay
of the stage: the shards' subsets are disjoint and together complete, and every shard counts its offsets
from one start time. So the merged records stand for the unsharded plan, and carry its hash
(`stage_plan_hash`): the hash an unsharded replay of the same settings records, which `kfchaos audit verify`
recomputes. Each shard's own plan hash (settings with its shard index) is kept next to it.

Merged order is stable whatever order the files come in: by intended send time, then shard, then request id.
A request id in two shards' records is refused: it would count one request twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kfchaos import safefile
from kfchaos.records import RecordsError
from kfchaos.traffic.plan import ReplayPlan
from kfchaos.traffic.recorder import read_records
from kfchaos.traffic.settings import ReplaySettings

MERGE_ORDER = [("intended", "ascending"), ("shard", "ascending"), ("request_id", "ascending")]


def stage_plan_hash(settings: ReplaySettings) -> str:
    """The plan hash of the whole stage these (shard) settings belong to: shard 0 of 1."""
    return ReplayPlan(replace(settings, shard=0, shards=1)).hash


def merge_records(parts: Sequence[str | Path], out: str | Path | None = None) -> pa.Table:
    """The shard record files as one table (written to `out` when given), in MERGE_ORDER.

    Refused: a file holding several shard indices, two files of one shard index, a request id in more than one
    file. A recording may repeat an id at another time (an unsharded replay sends both); those land in one
    shard, since the shard follows from the id, and the records' own check (kfchaos.records) judges them."""
    tables = []
    owner: dict[int, str] = {}
    for index, path in enumerate(parts):
        table = read_records([path])
        shards = pc.unique(table.column("shard")).to_pylist()
        if len(shards) > 1:
            raise RecordsError(f"shard records {path}: holds several shards {sorted(shards)}; expected one file each")
        for shard in shards:
            if shard in owner:
                raise RecordsError(f"shard records {path}: shard {shard} is also in {owner[shard]}")
            owner[shard] = str(path)
        tables.append(table.append_column("_part", pa.array(np.full(table.num_rows, index, np.int32))))
    if not tables:
        merged = read_records([])
    else:
        merged = pa.concat_tables(tables)
        pairs = merged.select(["request_id", "_part"]).group_by(["request_id", "_part"]).aggregate([])
        if pc.count_distinct(pairs.column("request_id")).as_py() != pairs.num_rows:
            raise RecordsError(_shared_ids(pairs, parts))
        merged = merged.sort_by(MERGE_ORDER).drop_columns(["_part"])
    if out is not None:
        safefile.replace_with(out, lambda handle: pq.write_table(merged, handle), private=True)
    return merged


def _shared_ids(pairs: pa.Table, parts: Sequence[str | Path]) -> str:
    """Names an id found in several files, and those files."""
    counts = pc.value_counts(pairs.column("request_id"))
    shared = [item["values"] for item in counts.to_pylist() if item["counts"] > 1]
    first = shared[0]
    where = pairs.filter(pc.equal(pairs.column("request_id"), first)).column("_part").to_pylist()
    files = ", ".join(str(parts[i]) for i in sorted(where))
    return (
        f"shard records: {len(shared)} request id(s) appear in more than one shard's file, e.g. {first!r} in "
        f"{files}; the shards of one stage must be disjoint (same seed and shard count, each index once)"
    )
