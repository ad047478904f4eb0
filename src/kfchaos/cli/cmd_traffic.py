"""`kfchaos traffic fit FILE`: fit a synthetic workload to a recording and report the fit.

Prints what was read and each fitted series (mean, quantiles, the lognormal fit and its Kolmogorov-Smirnov
distance), then the `synthetic:` block for an experiment; `--out FILE` writes that block as YAML, `--json`
prints everything as one JSON document. Exit 3 when the file is missing or holds nothing to fit.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kfchaos import safefile
from kfchaos.cli import EXIT_PASS, EXIT_USAGE


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("traffic", help="traffic tools: fit a synthetic workload to a recording")
    commands = parser.add_subparsers(dest="traffic_command", metavar="COMMAND")
    fit = commands.add_parser("fit", help="fit lengths, rate, arrivals, turns and system prompts to a recording")
    fit.add_argument("file", help="the recording (jsonl, plain or gzip) or prompt set (sharegpt)")
    fit.add_argument("--format", choices=("jsonl", "sharegpt"), default="jsonl")
    fit.add_argument(
        "--lengths", choices=("empirical", "lognormal"), default="empirical", help="which fit the block uses"
    )
    fit.add_argument("--rate", type=float, help="requests per second at 100 %% (needed for sharegpt: no times)")
    fit.add_argument("--seed", type=int, default=0, help="seed of the reservoir sample of a long file")
    fit.add_argument("--out", help="write the fitted `synthetic:` block to this YAML file")
    fit.add_argument("--json", action="store_true", help="print the fit and the block as JSON")
    fit.set_defaults(func=run_fit)
    parser.set_defaults(func=lambda args: (parser.print_help(sys.stderr), EXIT_USAGE)[1])


def run_fit(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from kfchaos.cli.jsonout import emit
    from kfchaos.errors import KfchaosError
    from kfchaos.spec import Synthetic
    from kfchaos.traffic.fit import fit_file, fitted_yaml, suggested

    fit = fit_file(args.file, args.format, seed=args.seed)
    settings: dict[str, Any] = {"fit_from": args.file, "fit_format": args.format, "fit_lengths": args.lengths}
    if args.rate is not None:
        settings["rate"] = args.rate
    try:
        spec = Synthetic.model_validate(settings)
    except ValidationError as exc:
        raise KfchaosError(f"--rate: {exc.errors()[0]['msg']}") from None
    block = fitted_yaml(suggested(spec, fit))
    if args.out:
        safefile.write_text(args.out, block)
    if args.json:
        import yaml

        emit({"fit": fit.to_dict(), "synthetic": yaml.safe_load(block)["synthetic"]})
        return EXIT_PASS
    print("\n".join(fit.describe()))
    print()
    print(block, end="")
    return EXIT_PASS
