"""YAML loading that remembers where every value came from, so errors can name the line.

PyYAML's composer gives nodes with marks; we construct plain Python data from the same node tree and
record the line of each mapping key and sequence item. Duplicate keys are reported (PyYAML would keep
the last one silently, which hides a typo just as an unknown field would).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


class _Loader(yaml.SafeLoader):
    pass


# Aliases share nodes, so a hostile file ("billion laughs") could make the walk exponential.
MAX_NODES = 200_000


class _TooLarge(Exception):
    pass


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int], problems: list[Problem], file: str) -> None:
    if len(lines) > MAX_NODES:
        raise _TooLarge
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            line = key_node.start_mark.line + 1
            if key is None:
                problems.append(Problem(file, line, path, "mapping keys must be plain strings"))
                continue
            child = (*path, key)
            if key in seen:
                problems.append(Problem(file, line, child, f"duplicate key (first defined on line {seen[key]})"))
            seen[key] = line
            lines[child] = line
            _walk(value_node, child, lines, problems, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines[child] = item.start_mark.line + 1
            _walk(item, child, lines, problems, file)


def load_yaml(text: str | bytes, file: str) -> YamlDocument:
    """One YAML document with its line map. Raises SpecError (never a parser exception) on bad input."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(
                [Problem(file, 1, (), f"not a UTF-8 text file ({exc.reason} at byte {exc.start})")]
            ) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise SpecError([Problem(file, line, (), "binary data (NUL byte) in a YAML file")])
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1 if isinstance(text, str) else 1
        raise SpecError(
            [Problem(file, line, (), f"not a text file: character #x{exc.character:04x} is not allowed in YAML")]
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError([Problem(file, 1, (), "the file is empty; expected an Experiment document")])
        lines: dict[Path, int] = {(): node.start_mark.line + 1}
        problems: list[Problem] = []
        _walk(node, (), lines, problems, file)
        if problems:
            raise SpecError(problems)
        data = loader.construct_document(node)
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
    finally:
        loader.dispose()
    return YamlDocument(file=file, data=data, lines=lines)
