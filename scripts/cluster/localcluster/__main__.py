"""`make cluster-up` / `make cluster-down`: PYTHONPATH=scripts/cluster python -m localcluster ACTION
(up, down, status; images: build the node's images from the working tree again and import them into the running
cluster; build: build every binary and image the cluster starts from, where not cached, and start nothing)."""

from __future__ import annotations

import argparse
import sys
import time

from .controlplane import ClusterError, build_all, default_state, down, refresh_images, reuse, up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="localcluster", description=__doc__)
    parser.add_argument("action", choices=("up", "down", "status", "images", "build"))
    args = parser.parse_args(argv)
    state = default_state()
    try:
        if args.action == "up":
            started = time.monotonic()
            env = up(state)
            print(f"cluster up in {time.monotonic() - started:.1f}s; to use it: source {env.env_file}")
        elif args.action == "down":
            stopped = down(state)
            print(f"cluster down: stopped {', '.join(stopped) or 'nothing (none was running)'}")
        elif args.action == "build":
            built = build_all()
            print(f"built the control plane's binaries and the node's images ({built.component})")
        elif args.action == "images":
            node_images = refresh_images(state)
            print(f"imported {node_images.component} and the node's other images")
        else:
            env = reuse(state.resolve())
            print(f"running: source {env.env_file}" if env else "not running")
            return 0 if env else 1
    except ClusterError as error:
        print(f"cluster {args.action}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
