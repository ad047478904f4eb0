"""`kfchaos schema`: the JSON Schema of the experiment format (shipped as experiments/schema.json)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kfchaos.cli import EXIT_PASS
from kfchaos.spec import json_schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("schema", help="print the JSON Schema of the experiment format")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(schema_text(), end="")
    return EXIT_PASS
