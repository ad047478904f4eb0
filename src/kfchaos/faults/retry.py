"""Retry with exponential backoff and jitter for API calls that may succeed on a second try."""

from __future__ import annotations

import random
from dataclasses import dataclass

# Throttled, or the API server (or its etcd) failed: worth another try. 4xx other than 429 are final.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    base_delay: float = 0.25
    max_delay: float = 8.0
    jitter: float = 0.2  # +-20 %, so many retrying steps do not hit the server in lockstep

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based); a server's Retry-After wins if longer."""
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        backoff *= 1 + random.uniform(-self.jitter, self.jitter)
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, self.max_delay))
        return max(0.0, backoff)
