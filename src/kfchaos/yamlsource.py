"""YAML loading that remembers where every value came from, so errors can name the line.

PyYAML's composer gives nodes with marks; we construct plain Python data from the same node tree and
record the line of each mapping key and sequence item. Duplicate keys are reported (PyYAML would keep
the last one silently, which hides a typo just as an unknown field would).

Hostile files are bounded before they cost anything: the file size is capped before parsing (MAX_BYTES), every
node visit is counted while walking the composed tree -- an alias is walked again each time it is used, so the
count is the size of the document with aliases expanded (MAX_NODES) -- and integers are capped in digits before
Python converts them (a 5,000-digit integer exceeds Python's int-string limit; a 400-digit one is never a valid
value here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

import yaml

from kfchaos.errors import Path, Problem, SpecError


@dataclass
class YamlDocument:
    file: str
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that exists in the file."""
        probe = tuple(path)
        while probe:
            if probe in self.lines:
                return self.lines[probe]
            probe = probe[:-1]
        return self.lines.get((), 1)

    def problem(self, path: Path, message: str) -> Problem:
        return Problem(self.file, self.line_of(path), path, message)


# libyaml's parser where PyYAML was built with it (about ten times faster than the pure-Python one, with the
# same marks); the pure-Python loader otherwise.
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


# Experiments, baselines and schedules are a few kilobytes; a megabyte is far past any real one and parses in
# well under a second.
MAX_BYTES = 1 << 20
# Aliases share nodes, so a hostile file ("billion laughs") could make the walk -- and everything that later
# walks the constructed data -- exponential. Counted per visit, aliases expanded, duplicate keys included.
MAX_NODES = 200_000
# The longest integer any field can need (nanosecond timestamps have 19 digits).
MAX_INT_CHARS = 40
# A file with more problems than this reports the first ones; the rest are the same mistake repeated.
MAX_PROBLEMS = 100
_INT_TAG = "tag:yaml.org,2002:int"


class _TooLarge(Exception):
    pass


def read_source(path: str | FsPath) -> bytes:
    """The bytes of a YAML input file, refusing one over MAX_BYTES before reading it. OSError if unreadable."""
    path = FsPath(path)
    with path.open("rb") as handle:
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise SpecError([Problem(str(path), 1, (), f"file too large (over {MAX_BYTES} bytes)")])
    return raw


@dataclass
class _Walk:
    file: str
    lines: dict[Path, int]
    problems: list[Problem] = field(default_factory=list)
    visits: int = 0

    def report(self, problem: Problem) -> None:
        if len(self.problems) < MAX_PROBLEMS and problem not in self.problems:
            self.problems.append(problem)


def _walk(node: yaml.Node, path: Path, state: _Walk) -> None:
    state.visits += 1
    if state.visits > MAX_NODES:
        raise _TooLarge
    lines, file = state.lines, state.file
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _INT_TAG and len(node.value) > MAX_INT_CHARS:
            state.report(
                Problem(file, node.start_mark.line + 1, path, f"integer too long ({len(node.value)} characters)")
            )
    elif isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            line = key_node.start_mark.line + 1
            if key is None:
                state.report(Problem(file, line, path, "mapping keys must be plain strings"))
                continue
            child = (*path, key)
            if key in seen:
                state.report(Problem(file, line, child, f"duplicate key (first defined on line {seen[key]})"))
            seen[key] = line
            lines.setdefault(child, line)
            _walk(value_node, child, state)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines.setdefault(child, item.start_mark.line + 1)
            _walk(item, child, state)


def load_yaml(text: str | bytes, file: str, *, max_bytes: int = MAX_BYTES) -> YamlDocument:
    """One YAML document with its line map. Raises SpecError (never a parser exception) on bad input. Every
    YAML from outside -- a file, or a server's answer (Prometheus's configuration) -- comes through here:
    bounded in bytes (`max_bytes`) and in nodes with aliases expanded (MAX_NODES: an alias bomb stops)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(
                [Problem(file, 1, (), f"not a UTF-8 text file ({exc.reason} at byte {exc.start})")]
            ) from None
    if len(text) > max_bytes:
        raise SpecError([Problem(file, 1, (), f"file too large (over {max_bytes} bytes)")])
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise SpecError([Problem(file, line, (), "binary data (NUL byte) in a YAML file")])
    loader = None
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            raise SpecError([Problem(file, 1, (), "the file is empty; expected an Experiment document")])
        state = _Walk(file, {(): node.start_mark.line + 1})
        _walk(node, (), state)
        if state.problems:
            raise SpecError(state.problems)
        data = loader.construct_document(node)
        lines = state.lines
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise SpecError(
            [Problem(file, line, (), f"not a text file: character #x{exc.character:04x} is not allowed in YAML")]
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        what = " ".join(part for part in (exc.context, exc.problem) if part)
        raise SpecError([Problem(file, line, (), f"YAML syntax error: {what}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(file, 1, (), f"YAML error: {exc}")]) from None
    except _TooLarge:
        raise SpecError(
            [Problem(file, 1, (), f"document too large (over {MAX_NODES} values, aliases expanded)")]
        ) from None
    except RecursionError:
        raise SpecError([Problem(file, 1, (), "YAML nesting too deep")]) from None
    except ValueError as exc:  # a scalar PyYAML cannot convert (int-string limit, bad timestamp)
        raise SpecError([Problem(file, 1, (), f"YAML value error: {str(exc)[:200]}")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDocument(file=file, data=data, lines=lines)
