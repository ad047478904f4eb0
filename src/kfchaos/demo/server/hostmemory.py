"""Real host memory for the demo server on a real node (`--real-host-memory-scale`).

Without a cluster the demo models host memory and ends itself at its limit (api.py, `_die_of_oom`). On a node
the kernel does that: this pool keeps `scale` times the engine's modelled host bytes really resident, in chunks
whose every page is written, so the container's cgroup charges them and the kernel's OOM killer acts at the pod's
memory limit, as it does for a vLLM server whose host-side KV mirror outgrows its container.
"""

from __future__ import annotations

import mmap

CHUNK_BYTES = 8 << 20
PAGE = mmap.PAGESIZE


class HostMemory:
    def __init__(self, scale: float) -> None:
        if not 0 < scale <= 1:
            raise ValueError("--real-host-memory-scale must be in (0, 1]")
        self.scale = scale
        self._chunks: list[mmap.mmap] = []

    @property
    def resident_bytes(self) -> int:
        return len(self._chunks) * CHUNK_BYTES

    def follow(self, modelled_bytes: int) -> None:
        """Grow or shrink the pool to `scale` x `modelled_bytes` (rounded to whole chunks)."""
        want = int(modelled_bytes * self.scale) // CHUNK_BYTES
        while len(self._chunks) < want:
            chunk = mmap.mmap(-1, CHUNK_BYTES)
            # An anonymous mapping costs nothing until written: touch every page so the memory is charged.
            for offset in range(0, CHUNK_BYTES, PAGE):
                chunk[offset] = 1
            self._chunks.append(chunk)
        while len(self._chunks) > want:
            self._chunks.pop().close()
