"""The per-request record: the one data contract between the replay and everything downstream.

The replay writes these columns to Parquet (one file per stage and shard, or merged); the verdict,
the report and the audit read them through this schema. Times are seconds as float64: `intended`
and `sent` on the replay's monotonic-anchored wall clock (Unix epoch seconds), latencies as durations.
A column that does not apply (TTFT for a plain HTTP request) is null, never 0, so "missing" can never
be mistaken for "fast".
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

# Error kinds a record's `error` column may hold (null when the request succeeded at the HTTP level).
ERROR_KINDS = (
    "timeout",  # no complete response within target.timeout
    "connect",  # connection refused / reset before a response
    "http",  # response with status >= 500 (or >= 400 where configured)
    "protocol",  # malformed HTTP or SSE stream
    "dropped",  # not sent: the concurrency limit was reached at its intended time
    "cancelled",  # the stage ended (abort or time-up) before a response
)

REQUEST_SCHEMA = pa.schema(
    [
        pa.field("stage", pa.int16(), nullable=False),  # stage percent, e.g. 60
        pa.field("shard", pa.int16(), nullable=False),  # shard index (0 when not sharded)
        pa.field("request_id", pa.string(), nullable=False),  # id in the traffic source
        pa.field("trace_id", pa.string(), nullable=False),  # X-Trace-ID / traceparent trace id (32 hex)
        pa.field("fault_active", pa.bool_(), nullable=False),  # whether any fault was active at send time
        pa.field("intended", pa.float64(), nullable=False),  # scheduled send time (epoch s)
        pa.field("sent", pa.float64(), nullable=True),  # actual send time (epoch s); null if dropped
        pa.field("status", pa.int16(), nullable=True),  # HTTP status; null if none received
        pa.field("error", pa.dictionary(pa.int8(), pa.string()), nullable=True),  # one of ERROR_KINDS
        pa.field("latency", pa.float64(), nullable=True),  # response complete - sent (s)
        pa.field("latency_intended", pa.float64(), nullable=True),  # response complete - intended (s)
        pa.field("ttft", pa.float64(), nullable=True),  # first token - sent (s), streaming only
        pa.field("itl_mean", pa.float64(), nullable=True),  # mean inter-token latency (s)
        pa.field("itl_p99", pa.float64(), nullable=True),  # p99 inter-token latency within the request (s)
        pa.field("itl_max", pa.float64(), nullable=True),
        pa.field("tpot", pa.float64(), nullable=True),  # (latency - ttft) / (output_tokens - 1)
        pa.field("prompt_tokens", pa.int32(), nullable=True),
        pa.field("output_tokens", pa.int32(), nullable=True),
        pa.field("bytes_sent", pa.int64(), nullable=True),
        pa.field("bytes_received", pa.int64(), nullable=True),
        pa.field("long_context", pa.bool_(), nullable=False),  # part of a long-context burst fault
        # Seconds spent opening connections (TCP, TLS) for this request, 0 on a kept-alive one; null if not
        # sent. Part of latency and ttft (which start before the connection, as in vLLM's bench client).
        pa.field("connect", pa.float64(), nullable=True),
    ],
    metadata={b"kfchaos.records.version": str(SCHEMA_VERSION).encode()},
)

COLUMNS = tuple(REQUEST_SCHEMA.names)
