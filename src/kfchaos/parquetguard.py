"""Parquet inputs checked against their own footer before anything is materialized.

A Parquet file states its rows, columns and the uncompressed size of each column chunk, dictionary page
included, in its footer (apache/parquet-format src/main/thrift/parquet.thrift: ColumnMetaData
`total_uncompressed_size`, "total byte size of all uncompressed pages in this column chunk (including the
headers)"). A 68 KB file whose dictionary holds one huge string expands to gigabytes when read; its footer says
so, and the file is refused here first. The footer's chunk size does not show the expansion of a dictionary,
though: a string column read as plain strings copies its dictionary entry into every row that names it (one
10 MB entry named by 500 rows is 5 GB). So each dictionary page's own header is read too (PageHeader
`uncompressed_page_size` and DictionaryPageHeader `num_values`, a few bytes at the chunk's
`dictionary_page_offset`), and a dictionary larger than MAX_DICTIONARY_BYTES, or whose entries average more
than MAX_DICTIONARY_ENTRY bytes, is refused. Writers keep dictionaries small (Arrow falls back to plain
encoding past 1 MiB: `dictionary_pagesize_limit`); the names and kinds kfchaos stores are tens of bytes.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kfchaos.records import RecordsError

MAX_FILE_BYTES = 4 << 30  # ten million records are ~300 MB on disk
MAX_ROWS = 50_000_000  # five times the largest run measured (10M records)
MAX_COLUMNS = 256  # kfchaos's records have about thirty
MAX_CHUNK_BYTES = 1 << 30  # one column chunk, uncompressed (Arrow's string arrays hold 2 GiB each)
MAX_TOTAL_BYTES = 16 << 30  # the whole file, uncompressed
MAX_BYTES_PER_ROW = 64 << 10  # one column's uncompressed bytes per row, on average (a request id is ~40 bytes)
MAX_DICTIONARY_BYTES = 4 << 20  # one dictionary page, uncompressed
MAX_DICTIONARY_ENTRY = 1 << 10  # its entries' average length


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise ValueError("truncated varint")


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def dictionary_page(head: bytes) -> tuple[int, int] | None:
    """(uncompressed size, entries) from the start of a dictionary page: a Thrift compact-protocol PageHeader
    (apache/parquet-format parquet.thrift: 1 type, 2 uncompressed_page_size, 3 compressed_page_size, 4 crc,
    7 dictionary_page_header { 1 num_values }). None when the bytes are not such a header."""
    fields: dict[int, int] = {}
    pos, field = 0, 0
    try:
        while pos < len(head):
            byte = head[pos]
            pos += 1
            if byte == 0:  # stop
                break
            delta, kind = byte >> 4, byte & 0x0F
            if delta == 0:
                return None  # a long-form field header: not what a PageHeader's first fields use
            field += delta
            if kind == 5:  # i32
                raw, pos = _varint(head, pos)
                fields[field] = _zigzag(raw)
            elif kind == 12 and field == 7:  # the DictionaryPageHeader: its first field is num_values (i32)
                inner = head[pos]
                if inner >> 4 != 1 or inner & 0x0F != 5:
                    return None
                raw, _ = _varint(head, pos + 1)
                return (fields[2], _zigzag(raw)) if 2 in fields else None
            else:
                return None  # a data page, or a field this reader does not need
    except (IndexError, ValueError):
        return None
    return None


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*.parquet") if p.is_file()) if path.is_dir() else [path]


def check(path: str | Path) -> None:
    """RecordsError naming the file and the bound when a Parquet file (or any file of a folder of them) is
    larger than the bounds above says, before any of its data is read. A file that does not exist, or is not
    Parquet, is left to the reader's own error."""
    for file in _files(Path(path)):
        try:
            length = file.stat().st_size
            if length > MAX_FILE_BYTES:
                raise RecordsError(f"{file}: {length} bytes, more than {MAX_FILE_BYTES >> 30} GiB of records")
            meta = pq.read_metadata(file)
        except (OSError, pa.ArrowInvalid):
            continue
        if meta.num_rows > MAX_ROWS or meta.num_rows < 0:
            raise RecordsError(f"{file}: {meta.num_rows} rows, more than {MAX_ROWS}")
        if meta.num_columns > MAX_COLUMNS:
            raise RecordsError(f"{file}: {meta.num_columns} columns, more than {MAX_COLUMNS}")
        total = 0
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            rows = max(group.num_rows, 1)
            for c in range(group.num_columns):
                chunk = group.column(c)
                size = chunk.total_uncompressed_size
                total += max(size, 0)
                if size > MAX_CHUNK_BYTES or size / rows > MAX_BYTES_PER_ROW:
                    raise RecordsError(
                        f"{file}: column {chunk.path_in_schema!r} expands to {size} bytes for {group.num_rows} "
                        f"rows (row group {g}; dictionary included): past {MAX_CHUNK_BYTES >> 20} MiB a chunk or "
                        f"{MAX_BYTES_PER_ROW >> 10} KiB a row; not kfchaos records"
                    )
                if chunk.has_dictionary_page:
                    _check_dictionary(file, length, chunk, g)
        if total > MAX_TOTAL_BYTES:
            raise RecordsError(f"{file}: expands to {total} bytes, more than {MAX_TOTAL_BYTES >> 30} GiB")


def _check_dictionary(file: Path, length: int, chunk: pq.ColumnChunkMetaData, group: int) -> None:
    offset = chunk.dictionary_page_offset
    if offset is None or not 0 <= offset < length:
        raise RecordsError(f"{file}: column {chunk.path_in_schema!r}: dictionary page offset outside the file")
    with file.open("rb") as handle:
        handle.seek(offset)
        found = dictionary_page(handle.read(64))
    if found is None:
        raise RecordsError(f"{file}: column {chunk.path_in_schema!r}: unreadable dictionary page header")
    size, entries = found
    if size < 0 or entries < 0 or size > MAX_DICTIONARY_BYTES or size > MAX_DICTIONARY_ENTRY * max(entries, 1):
        raise RecordsError(
            f"{file}: column {chunk.path_in_schema!r} (row group {group}) has a dictionary of {size} bytes for "
            f"{entries} entries: past {MAX_DICTIONARY_BYTES >> 20} MiB or {MAX_DICTIONARY_ENTRY} bytes an entry, "
            "it expands into every row that names it; not kfchaos records"
        )
