"""Read YAML keeping line numbers, so every error can point at ``file:line``.

Mappings load as :class:`LineDict` (a dict that remembers the line of each key) and
sequences as :class:`LineList` (remembers the line of each item). Anything that goes
wrong while reading — a missing file, bad UTF-8, a YAML syntax error, an empty file,
a duplicate key — becomes a :class:`~te_ccl.errors.SpecError` naming the file and line.

>>> d = parse_yaml("a: 1\\nb:\\n  - x\\n  - y\\n", "demo.yaml")
>>> d, d.line_of("b"), d["b"].line_of(1)
({'a': 1, 'b': ['x', 'y']}, 2, 4)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from te_ccl.errors import SpecError
from te_ccl.outputs import check_input_file

__all__ = ["LineDict", "LineList", "parse_yaml", "read_yaml", "MAX_YAML_BYTES"]

MAX_YAML_BYTES = 128 << 20  # a million links' lines; larger is parsed into tens of GB


class LineDict(dict):
    """A YAML mapping with the line (1-based) where it and each of its keys start."""

    line: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines: dict[Any, int] = {}

    def line_of(self, key: Any) -> int | None:
        return self.key_lines.get(key, self.line)


class LineList(list):
    """A YAML sequence with the line (1-based) where it and each of its items start."""

    line: int | None = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.item_lines: list[int] = []

    def line_of(self, index: int) -> int | None:
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


class _Loader(yaml.SafeLoader):
    """SafeLoader building LineDict/LineList and refusing duplicate keys."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark) from None
        if key in result:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def parse_yaml(text: str, file: str) -> Any:
    """Parse one YAML document from ``text``; ``file`` names it in errors."""
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = e.problem or e.context or "invalid YAML"
        if e.context and e.context_mark is not None and e.context_mark.line + 1 != line:
            problem += f" ({e.context} started at line {e.context_mark.line + 1})"
        raise SpecError(f"YAML syntax error: {problem}", file=file, line=line) from None
    except yaml.YAMLError as e:
        raise SpecError(f"YAML error: {' '.join(str(e).split())}", file=file) from None
    except RecursionError:
        raise SpecError("YAML nested too deeply", file=file) from None
    if data is None:
        raise SpecError("file is empty; expected a YAML mapping", file=file)
    return data


def read_yaml(path: str | Path) -> Any:
    """Read and parse the YAML file at ``path`` (errors name the path as given)."""
    file = str(path)
    check_input_file(path, limit=MAX_YAML_BYTES)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", file=file) from None
    except IsADirectoryError:
        raise SpecError("is a directory, expected a YAML file", file=file) from None
    except UnicodeDecodeError:
        raise SpecError("not UTF-8 text; expected a YAML file", file=file) from None
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror}", file=file) from None
    return parse_yaml(text, file)
