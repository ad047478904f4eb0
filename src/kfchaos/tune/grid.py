"""The tuning grid: the serving configurations `kfchaos tune` runs the experiment against, one chaos run each.

A grid file (YAML, `kind: TuneGrid`) lists configurations by name. Each sets serving flags (`args`, vLLM's flag
names without the dashes: `max-num-seqs: 128`, `enable-prefix-caching: true`), environment variables (`env`) and
`replicas`; locally only the demo server's flags apply (kfchaos.demo.runner.localtune refuses the rest, naming the
line). Errors name the file, line and field as an experiment's do (kfchaos.yamlsource, kfchaos.errors).

A grid is input from whoever can open a pull request, so it is held to bounds before anything runs: the YAML to
kfchaos.yamlsource's (a megabyte; 200,000 values with aliases expanded, so an alias bomb stops there), at most
MAX_CONFIGURATIONS configurations of at most MAX_SETTINGS flags and MAX_SETTINGS environment variables each, numbers
finite and within MAX_ARG_INT, and every text value a configuration hands a server one plain word (`value_problem`):
no shell syntax, no white space or control character, and a flag's value not starting with `-` (a server's argument
parser would read it as a flag of its own). The demo server gets its flags as an argv list (never a shell), and a
cluster configuration names a Deployment kfchaos does not change; the rule holds for what the values may yet reach
(a Deployment's args, an entrypoint's `sh -c`, the command line a reader copies from `summary()`).

"Cheapest" is one rule (`cost_of`): an explicit `cost` when the grid gives one for every configuration, else the GPU
memory the configuration reserves, replicas x gpu-memory-utilization (vLLM's default utilization 0.9 where the flag
is not set: vllm-project/vllm, vllm/engine/arg_utils.py, EngineArgs `gpu_memory_utilization: float = 0.90`, as read
in a v0.6-era copy; later releases keep 0.9 in their cache config, not re-read here).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError, field_validator

from kfchaos.errors import Problem, SpecError
from kfchaos.spec import Selector, endpoint_problem
from kfchaos.types import DnsLabel, StrictModel
from kfchaos.yamlsource import MAX_PROBLEMS, YamlDocument, load_yaml, read_source

GRID_KIND = "TuneGrid"
API_VERSION = "kfchaos.io/v1alpha1"
# One chaos run per configuration: a grid past this is a search, not a sweep (and hours of runs).
MAX_CONFIGURATIONS = 32
# vLLM's default --gpu-memory-utilization (vllm/engine/arg_utils.py, EngineArgs.gpu_memory_utilization = 0.90).
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
FLAG_NAME = r"^[a-z0-9][a-z0-9-]{0,62}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
# Flags (and environment variables) one configuration sets: vLLM has about 150 flags; a grid that sets more than
# this is a mistake or an attack on everything that walks the grid once per configuration.
MAX_SETTINGS = 64
# The largest whole number a flag takes: vLLM's counts (sequences, batched tokens, context length) are int32s.
MAX_ARG_INT = 2**31 - 1
# A text value is one word of these characters (model names `org/model`, dtypes, paths inside a container,
# `expandable_segments:True,max_split_size_mb:512`): none is shell syntax (POSIX sh, "Token Recognition" and
# "Quoting": no `;&|<>$`\'"` nor white space, globs, `~`, `#`, `!`, parentheses or braces).
PLAIN_WORD = re.compile(r"[A-Za-z0-9_.,:/@%+=-]{1,256}")


def value_problem(value: str, *, flag: bool) -> str | None:
    """Why a text value a configuration hands a server is refused, or None. `flag`: a flag's value, which must not
    start with `-` (`--tokenizer --trust-remote-code` would set a second flag instead of a tokenizer)."""
    if not PLAIN_WORD.fullmatch(value):
        shown = repr(value[:70])
        return (
            f"{shown} is not one plain word: a value is 1 to 256 letters, digits and `_.,:/@%+=-` (no white space, "
            "no shell syntax such as ; & | $ ` quotes or redirections)"
        )
    if flag and value.startswith("-"):
        return f"{value[:70]!r} starts with '-': a server would read it as a flag of its own, not as this flag's value"
    return None


def _arg_value(value: bool | int | float | str) -> bool | int | float | str:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > MAX_ARG_INT:
        raise ValueError(f"{value} is out of range (at most {MAX_ARG_INT} either way)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number")
    problem = value_problem(value, flag=True) if isinstance(value, str) else None
    if problem:
        raise ValueError(problem)
    return value


def _env_value(value: str) -> str:
    problem = value_problem(value, flag=False)
    if problem:
        raise ValueError(problem)
    return value


ArgValue = Annotated[bool | int | float | str, AfterValidator(_arg_value)]
EnvValue = Annotated[str, AfterValidator(_env_value)]


class GridMetadata(StrictModel):
    name: DnsLabel
    description: str = ""


class ConfiguredTarget(StrictModel):
    """On a cluster: where this configuration already runs (its Service and its pods' labels). kfchaos does not
    change Deployments yet: each configuration names a Deployment a team runs with its settings."""

    endpoint: str
    selector: Selector

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        problem = endpoint_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class Configuration(StrictModel):
    """One serving configuration: what is changed on the target for its run."""

    name: DnsLabel
    args: dict[str, ArgValue] = Field(
        default_factory=dict, max_length=MAX_SETTINGS, description="serving flags, vLLM names without --"
    )
    env: dict[str, EnvValue] = Field(default_factory=dict, max_length=MAX_SETTINGS)
    replicas: int = Field(1, ge=1, le=64)
    cost: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="what running it costs, in any unit the grid's rows share"
    )
    target: ConfiguredTarget | None = Field(None, description="the cluster sweep's target for this configuration")

    @field_validator("args")
    @classmethod
    def _flag_names(cls, value: dict[str, ArgValue]) -> dict[str, ArgValue]:
        for name in value:
            if not re.fullmatch(FLAG_NAME, name):
                raise ValueError(f"{name[:70]!r} is not a flag name (lowercase, dashes, without the leading --)")
        utilization = value.get("gpu-memory-utilization")
        if utilization is not None and (
            isinstance(utilization, bool) or not isinstance(utilization, int | float) or not 0 < utilization <= 1
        ):
            raise ValueError(f"gpu-memory-utilization must be a number in (0, 1], not {utilization!r}")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(ENV_NAME, name):
                raise ValueError(f"{name[:70]!r} is not an environment variable name")
        return value

    def gpu_memory(self) -> float:
        """GPUs' worth of memory reserved: replicas x gpu-memory-utilization (vLLM's default where unset)."""
        utilization = self.args.get("gpu-memory-utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)
        assert isinstance(utilization, int | float)  # _flag_names
        return self.replicas * float(utilization)

    def summary(self) -> str:
        """The configuration as flags, for tables: `--max-num-seqs 128 --enable-prefix-caching x2`."""
        parts = []
        for name, value in self.args.items():
            if value is True:
                parts.append(f"--{name}")
            elif value is not False:
                parts.append(f"--{name} {value}")
        parts += [f"{key}={value}" for key, value in self.env.items()]
        if self.replicas != 1:
            parts.append(f"x{self.replicas}")
        return " ".join(parts) or "(defaults)"


class GridSpec(StrictModel):
    configurations: list[Configuration] = Field(min_length=1, max_length=MAX_CONFIGURATIONS)

    @field_validator("configurations")
    @classmethod
    def _unique_names_and_costs_for_all_or_none(cls, value: list[Configuration]) -> list[Configuration]:
        names = [c.name for c in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"configuration names must be unique; repeated: {', '.join(repeated)}")
        priced = [c.name for c in value if c.cost is not None]
        if priced and len(priced) != len(value):
            unpriced = [c.name for c in value if c.cost is None]
            raise ValueError(
                f"cost is given for {', '.join(priced)} but not for {', '.join(unpriced)}: give every configuration "
                "a cost, or none (then the cheapest is the least GPU memory: replicas x gpu-memory-utilization)"
            )
        return value


class TuneGrid(StrictModel):
    apiVersion: str = Field(pattern=f"^{API_VERSION}$")
    kind: str = Field(pattern=f"^{GRID_KIND}$")
    metadata: GridMetadata
    spec: GridSpec

    @property
    def configurations(self) -> list[Configuration]:
        return self.spec.configurations

    @property
    def priced(self) -> bool:
        """Whether the grid gives explicit costs (else the cheapest is the least GPU memory)."""
        return all(c.cost is not None for c in self.configurations)

    def cost_of(self, configuration: Configuration) -> float:
        """The one rule for "cheapest": the explicit cost, else the GPU memory reserved."""
        return configuration.cost if configuration.cost is not None else configuration.gpu_memory()

    @property
    def cost_rule(self) -> str:
        if self.priced:
            return "the grid's own `cost` of each configuration"
        return "GPU memory reserved: replicas x gpu-memory-utilization (vLLM's default 0.9 where unset)"


@dataclass(frozen=True)
class LoadedGrid:
    """The grid and the document it was read from (for errors naming a configuration's line)."""

    grid: TuneGrid
    document: YamlDocument

    def problem(self, index: int, field: str | None, message: str) -> Problem:
        path: tuple[str | int, ...] = ("spec", "configurations", index)
        return self.document.problem((*path, field) if field else path, message)


def parse_grid(text: str | bytes, file: str) -> LoadedGrid:
    document = load_yaml(text, file)
    if not isinstance(document.data, dict):
        kind = type(document.data).__name__ if document.data is not None else "null"
        raise SpecError([document.problem((), f"expected a mapping (a {GRID_KIND} document), got {kind}")])
    try:
        grid = TuneGrid.model_validate(document.data)
    except ValidationError as exc:
        problems = [document.problem(tuple(e["loc"]), _message(e)) for e in exc.errors(include_url=False)]
        # Capped as yamlsource caps a file's problems: past the first hundred they are one mistake repeated.
        unique = sorted(dict.fromkeys(problems), key=lambda p: p.line)[:MAX_PROBLEMS]
        raise SpecError(unique) from None
    return LoadedGrid(grid, document)


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return f"unknown field (not part of the {GRID_KIND} format; check the spelling)"
    if error["type"] == "missing":
        return "required field is missing"
    return str(error["msg"]).removeprefix("Value error, ")


def load_grid(path: str | Path) -> LoadedGrid:
    try:
        raw = read_source(path)
    except OSError as exc:
        raise SpecError([Problem(str(path), 1, (), f"cannot read file: {exc.strerror or exc}")]) from None
    return parse_grid(raw, str(path))
