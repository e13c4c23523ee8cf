"""A user's YAML file edited to hold new values, everything else kept: ruamel.yaml's round trip.

`varlen tune --write` gives back the user's config with the loader settings it picked. PyYAML's dump
would drop every comment and re-quote and re-indent the rest, so the file is loaded with ruamel.yaml's
round-trip loader (comments, key order, quotes and flow style held with the data), the values that differ
set into it, and dumped with the file's own indentation. What differs is decided on the values as
jsonargparse reads them (PyYAML, YAML 1.1), so a line is touched only where its value changes; a string
set where one was quoted keeps its quotes, and one PyYAML would read as something else is quoted. A key
added to a mapping goes right after its last entry (the comments that followed that entry, such as the
next section's heading, stay after the new key). A header of comment lines (`note`) replaces the one an
earlier `varlen tune --write` put there.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, ScalarString
from ruamel.yaml.tokens import CommentToken

__all__ = ["HEADER", "edited_yaml"]

#: the first words of the header `varlen tune --write` puts on the file it writes
HEADER = "written by varlen tune"
_KEY_ALONE = re.compile(r"^( *)[^\s#\-][^#]*:\s*(#.*)?$")  # `key:` with its value on the lines below
_ITEM = re.compile(r"^( *)- ")


def edited_yaml(text: str, wanted: Mapping[str, Any], note: str = "") -> str:
    """`text` (a YAML mapping) edited so that it reads as `wanted`, headed by `note`'s lines as comments.

    Only the leaves of `wanted` that differ from `text`'s are set; keys of `text` that `wanted` lacks stay."""
    before = yaml.safe_load(text) or {}
    rt = _round_trip(text)
    doc = rt.load(text)
    if doc is None:
        doc = CommentedMap()
    for path, value in _changes(before, wanted):
        _set(doc, path, value)
    out = io.StringIO()
    rt.dump(doc, out)
    header = "".join(f"# {line}\n" for line in note.splitlines())
    return header + _without_header(out.getvalue())


def _round_trip(text: str) -> YAML:
    """ruamel.yaml's round-trip YAML with the file's indentation, its quotes, lines never wrapped and
    None written `null`."""
    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 1 << 16
    mapping, sequence, offset = _indents(text)
    rt.indent(mapping=mapping, sequence=sequence, offset=offset)
    rt.explicit_start = text.lstrip().startswith("---")
    rt.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return rt


def _indents(text: str) -> tuple[int, int, int]:
    """The file's mapping indent, and its block sequences' indent and dash offset (ruamel.yaml's `indent`),
    read off the first nested mapping and the first block sequence (2, 2, 0 where there is none)."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    mapping = sequence = offset = None
    for above, line in zip(lines, lines[1:], strict=False):
        parent = _KEY_ALONE.match(above)
        if parent is None:
            continue
        depth, item = len(line) - len(line.lstrip(" ")), _ITEM.match(line)
        if item and sequence is None:
            offset = len(item.group(1)) - len(parent.group(1))
            sequence = offset + 2
        elif not item and mapping is None and depth > len(parent.group(1)):
            mapping = depth - len(parent.group(1))
    mapping = mapping or 2
    return mapping, sequence if sequence is not None else mapping, offset or 0


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind (`1`, `1.0` and `True` differ in a config)."""
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _changes(before: Mapping[str, Any], wanted: Mapping[str, Any], path: tuple = ()) -> Iterator[tuple]:
    """`(path, value)` of each leaf of `wanted` that `before` lacks or holds otherwise."""
    for key, value in wanted.items():
        old = before.get(key) if isinstance(before, Mapping) else None
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            yield from _changes(old, value, (*path, key))
        elif not isinstance(before, Mapping) or key not in before or not _same(old, value):
            yield (*path, key), value


def _set(doc: CommentedMap, path: tuple, value: Any) -> None:
    node = doc
    for key in path[:-1]:
        if not isinstance(node.get(key), Mapping):
            _put(node, key, CommentedMap())
        node = node[key]
    _put(node, path[-1], value)


def _put(mapping: CommentedMap, key: Any, value: Any) -> None:
    """`mapping[key] = value` in the style of what it replaces; a new key right after the last entry."""
    if key in mapping:
        mapping[key] = _styled(value, mapping[key])
        return
    last = next(reversed(mapping), None) if len(mapping) else None
    mapping[key] = _styled(value, None)
    if last is not None and not mapping.fa.flow_style():
        _move_trailing(mapping, last, key)


def _styled(value: Any, old: Any) -> Any:
    """`value` as the file would write it: a string quoted as the one it replaces, or double-quoted where
    PyYAML would read it plain as something else."""
    if isinstance(value, Mapping):
        return CommentedMap((k, _styled(v, None)) for k, v in value.items())
    if not isinstance(value, str) or isinstance(value, ScalarString):
        return value
    if isinstance(old, ScalarString):
        return type(old)(value)
    return value if _plain_safe(value) else DoubleQuotedScalarString(value)


def _plain_safe(value: str) -> bool:
    try:
        return yaml.safe_load(value) == value and "\n" not in value
    except yaml.YAMLError:
        return False


def _move_trailing(mapping: CommentedMap, last: Any, new: Any) -> None:
    """The full-line comments and blank lines after `mapping`'s former last entry (`last`, or the deepest last
    entry of its value) moved after the entry `new` added behind it (its deepest last entry): they belong to
    what follows."""
    holder, key, slot = _tail(mapping, last)
    items = holder.ca.items.get(key)
    token = items[slot] if items else None
    end_of_line, _, rest = token.value.partition("\n") if token is not None else ("", "", "")
    if not rest:
        return
    token.value = end_of_line + "\n"
    holder, key, slot = _tail(mapping, new)
    holder.ca.items.setdefault(key, [None, None, None, None])[slot] = CommentToken("\n" + rest, CommentMark(0), None)


def _tail(node: Any, key: Any) -> tuple[Any, Any, int]:
    """The container, key and comment slot that hold what follows `node[key]` (the deepest last entry of
    a block mapping or sequence value: ruamel.yaml attaches the comments after a block to its last leaf)."""
    value = node[key]
    if isinstance(value, CommentedMap) and len(value) and not value.fa.flow_style():
        return _tail(value, next(reversed(value)))
    if isinstance(value, CommentedSeq) and len(value) and not value.fa.flow_style():
        if isinstance(value[-1], CommentedMap) and len(value[-1]) and not value[-1].fa.flow_style():
            return _tail(value[-1], next(reversed(value[-1])))
        return value, len(value) - 1, 0
    return node, key, 2 if isinstance(node, CommentedMap) else 0


def _without_header(text: str) -> str:
    """`text` without the header comment lines an earlier `varlen tune --write` put on it."""
    lines = text.splitlines(keepends=True)
    if not lines or not lines[0].startswith(f"# {HEADER}"):
        return text
    end = 1
    while end < len(lines) and lines[end].startswith("# --"):
        end += 1
    return "".join(lines[end:])
