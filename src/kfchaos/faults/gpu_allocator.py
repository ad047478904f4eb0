"""Hold a share of a GPU's memory for a while: the program the gpu-memory-pressure pod (or exec) runs.

    python -m kfchaos.faults.gpu_allocator --share 0.3 --duration 600 --ready-file /tmp/kfchaos-gpu-held

It allocates `share` of the device's total memory in chunks (so a fragmented or nearly full GPU still
gives what it can), touches every byte so the memory is really committed, writes the ready file (the
pod's readiness probe) with what it holds, and frees everything when the duration ends or on SIGTERM /
SIGINT (pod deletion, activeDeadlineSeconds). The CUDA calls sit behind `DeviceMemory`, so the share
arithmetic, the chunking and the signal handling are tested on machines without a GPU (`SimulatedDevice`).

It uses the CUDA driver API (libcuda.so.1), which the NVIDIA container toolkit mounts into every GPU
container, so the image needs no CUDA toolkit.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Protocol

from kfchaos import safefile

MIB = 1 << 20
EXIT_NO_GPU = 3
# Held less than asked (e.g. vLLM preallocated ~90 % of the GPU, gpu_memory_utilization): the fault is not
# what the experiment says, so the pod is never ready and fails at once; the run reads it as not injected.
EXIT_SHORT = 4
DEFAULT_CHUNK = 256 * MIB
# Left free on purpose: the CUDA context of the allocator itself and the driver need some room.
DEFAULT_RESERVE = 256 * MIB


class OutOfDeviceMemory(Exception):
    pass


class DeviceMemory(Protocol):
    def info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory."""
        ...

    def allocate(self, size: int) -> int:
        """Allocate and touch `size` bytes; returns a handle. Raises OutOfDeviceMemory."""
        ...

    def free(self, handle: int) -> None: ...


@dataclass(frozen=True)
class HoldResult:
    total: int
    target: int  # the share of the total that was asked for
    held: int  # bytes actually held (less than target when others use the GPU)
    chunks: int
    freed: bool
    stopped_by: str  # "duration" or the signal name

    @property
    def shortfall(self) -> int:
        return max(0, self.target - self.held)


def requested_bytes(share: float, total: int) -> int:
    """`share` of the device's total memory, in bytes."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    return math.floor(share * total)


def bytes_to_take(requested: int, free: int, reserve: int = DEFAULT_RESERVE) -> int:
    """What can be taken of `requested`: never more than is free minus the reserve (the rest is a shortfall)."""
    return max(0, min(requested, free - reserve))


def chunk_sizes(target: int, chunk: int = DEFAULT_CHUNK) -> list[int]:
    """`target` split into chunks of at most `chunk` bytes (the last one smaller)."""
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    full, rest = divmod(target, chunk)
    return [chunk] * full + ([rest] if rest else [])


class Allocator:
    """Takes the memory, holds it until told to stop, frees it. `stop()` is safe from a signal handler."""

    def __init__(self, device: DeviceMemory, chunk: int = DEFAULT_CHUNK, reserve: int = DEFAULT_RESERVE) -> None:
        self.device = device
        self.chunk = chunk
        self.reserve = reserve
        self._stop = threading.Event()
        self._stopped_by = "duration"
        self._handles: list[int] = []

    def stop(self, reason: str) -> None:
        self._stopped_by = reason
        self._stop.set()

    def hold(self, share: float, duration: float, on_held: Callable[[int, int, int], None] | None = None) -> HoldResult:
        free, total = self.device.info()
        target = requested_bytes(share, total)
        held = 0
        try:
            for size in chunk_sizes(bytes_to_take(target, free, self.reserve), self.chunk):
                if self._stop.is_set():
                    break
                try:
                    self._handles.append(self.device.allocate(size))
                except OutOfDeviceMemory:
                    break  # another process took memory meanwhile: hold what we have
                held += size
            if on_held is not None and not self._stop.is_set():
                on_held(held, target, total)
            self._stop.wait(timeout=max(0.0, duration))
        finally:
            chunks = len(self._handles)
            while self._handles:
                self.device.free(self._handles.pop())
        return HoldResult(total, target, held, chunks, freed=not self._handles, stopped_by=self._stopped_by)


class SimulatedDevice:
    """A device with `total` bytes, `used` taken by others: for tests and for `--simulate` dry runs."""

    def __init__(self, total: int, used: int = 0) -> None:
        self.total = total
        self.used = used
        self.allocations: dict[int, int] = {}
        self._next = 1

    def info(self) -> tuple[int, int]:
        return self.total - self.used - sum(self.allocations.values()), self.total

    def allocate(self, size: int) -> int:
        if size > self.info()[0]:
            raise OutOfDeviceMemory(f"cannot allocate {size} bytes")
        handle, self._next = self._next, self._next + 1
        self.allocations[handle] = size
        return handle

    def free(self, handle: int) -> None:
        del self.allocations[handle]


class CudaDriverDevice:
    """Device memory through the CUDA driver API (libcuda.so.1) on device `ordinal`."""

    _OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY

    def __init__(self, ordinal: int = 0, library: str = "libcuda.so.1") -> None:
        self.cuda = ctypes.CDLL(library)
        self._check(self.cuda.cuInit(0), "cuInit")
        device = ctypes.c_int()
        self._check(self.cuda.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self._check(self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), device), "cuDevicePrimaryCtxRetain")
        self._check(self.cuda.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        self.cuda.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]

    def _check(self, code: int, call: str) -> None:
        if code == self._OUT_OF_MEMORY:
            raise OutOfDeviceMemory(call)
        if code != 0:
            raise RuntimeError(f"{call} failed with CUDA error {code}")

    def info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value, total.value

    def allocate(self, size: int) -> int:
        pointer = ctypes.c_uint64()
        self._check(self.cuda.cuMemAlloc_v2(ctypes.byref(pointer), size), "cuMemAlloc")
        # Touch it: the memory counts against the GPU only once written on some drivers.
        self._check(self.cuda.cuMemsetD8_v2(pointer, 0xA5, size), "cuMemsetD8")
        self._check(self.cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        return pointer.value

    def free(self, handle: int) -> None:
        self._check(self.cuda.cuMemFree_v2(handle), "cuMemFree")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kfchaos.faults.gpu_allocator", description=__doc__.split("\n")[0])
    parser.add_argument("--share", type=float, required=True, help="share of total GPU memory, 0 < share <= 1")
    parser.add_argument("--duration", type=float, required=True, help="seconds to hold it")
    parser.add_argument("--ready-file", type=Path, help="written (JSON) once the memory is held; removed after")
    parser.add_argument("--device", type=int, default=int(os.environ.get("KFCHAOS_GPU_ORDINAL", "0")))
    parser.add_argument("--chunk-mib", type=int, default=DEFAULT_CHUNK // MIB)
    parser.add_argument("--reserve-mib", type=int, default=DEFAULT_RESERVE // MIB)
    parser.add_argument("--simulate", type=int, metavar="BYTES", help="no GPU: a simulated device of this size")
    parser.add_argument(
        "--simulate-used", type=int, default=0, metavar="BYTES", help="with --simulate: bytes others already hold"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        device: DeviceMemory = (
            SimulatedDevice(args.simulate, args.simulate_used) if args.simulate else CudaDriverDevice(args.device)
        )
    except (OSError, RuntimeError) as exc:
        # No driver library or no device: say what the pod needs instead of a traceback.
        print(
            f"gpu_allocator: cannot use GPU {args.device} ({exc}); the pod needs an nvidia.com/gpu resource "
            "and the NVIDIA container toolkit, which mounts libcuda.so.1",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    allocator = Allocator(device, chunk=args.chunk_mib * MIB, reserve=args.reserve_mib * MIB)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        allocator.stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def on_held(held: int, target: int, total: int) -> None:
        report = {"held": held, "target": target, "total": total, "pid": os.getpid(), "time": time.time()}
        if held < target:
            # Never ready: readiness is the backend's evidence that the whole share is held.
            print(json.dumps({"event": "short", **report}), flush=True)
            allocator.stop("short")
            return
        if args.ready_file is not None:  # first the file, then the line: whoever reads the line sees the file
            safefile.write_text(args.ready_file, json.dumps(report))  # renamed into place: never half-written
        print(json.dumps({"event": "held", **report}), flush=True)

    try:
        result = allocator.hold(args.share, args.duration, on_held)
    finally:
        if args.ready_file is not None:
            args.ready_file.unlink(missing_ok=True)
    print(json.dumps({"event": "freed", **asdict(result), "shortfall": result.shortfall}), flush=True)
    if result.stopped_by == "short":
        print(
            f"gpu_allocator: held {result.held} of the {result.target} bytes asked ({result.total} on the device); "
            "other processes hold the rest (vLLM preallocates gpu_memory_utilization, ~90 %): not injected",
            file=sys.stderr,
        )
        return EXIT_SHORT
    return 0


if __name__ == "__main__":
    sys.exit(main())
