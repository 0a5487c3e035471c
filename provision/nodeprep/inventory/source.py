"""Guards on the inventory file itself, applied before any Ansible parser sees it.

Ansible's parsers trust their input: a FIFO blocks them forever, a range like
``h[0000000:9999999]`` expands into ten million host objects, a 2 MiB host name
takes minutes in the INI plugin, and a YAML alias bomb is walked node by node.
Every limit here is far beyond a real fleet and is checked on the raw text in
linear time, so hostile input is refused within a second.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from nodeprep.textfile import TextFileError, read_text

MAX_BYTES = 8 << 20
MAX_LINE_CHARS = 16 << 10
MAX_HOSTS = 50_000
MAX_YAML_NODES = 2_000_000
YAML_SUFFIXES = (".yml", ".yaml", ".json")
_RANGE_RE = re.compile(r"\[([0-9]+|[a-zA-Z]):([0-9]+|[a-zA-Z])(?::([0-9]+))?\]")
_FIX = "pass one INI or YAML inventory file (UTF-8 text)"
_INI_SECTION_RE = re.compile(r"^\[[^\]\s]+\]\s*(?:[#;].*)?$")


class SourceError(ValueError):
    """The file cannot be an inventory; the message names the file and the fix."""


@dataclass(frozen=True)
class InventoryText:
    """The decoded text of an inventory file that passed every guard."""

    path: Path
    text: str

    @property
    def is_yaml(self) -> bool:
        return self.path.suffix.lower() in YAML_SUFFIXES

    @property
    def plugin(self) -> str | None:
        """The inventory plugin a YAML plugin config names (``plugin: amazon.aws.aws_ec2``)."""
        if not self.is_yaml:
            return None
        try:
            data = yaml.safe_load(self.text)
        except yaml.YAMLError:
            return None
        name = data.get("plugin") if isinstance(data, dict) else None
        return name if isinstance(name, str) and name.strip() else None


def read_guarded(path: Path) -> InventoryText:
    """The file's text, or :class:`SourceError` for anything no real inventory looks like."""
    source = InventoryText(path, _decode(path))
    _check_lines(source)
    if source.is_yaml:
        _check_yaml_expansion(path, source.text)
    return source


def _decode(path: Path) -> str:
    try:
        text = read_text(path, f"inventory {path}", _FIX, MAX_BYTES)
    except TextFileError as exc:
        raise SourceError(str(exc)) from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise SourceError(f"inventory {path}:{line} contains a NUL byte; {_FIX}.")
    return text


def _check_lines(source: InventoryText) -> None:
    """Line length, INI section headers and an upper bound on the hosts the file defines.

    The bound counts every INI line outside ``:vars`` sections as a host (ranges by
    their expansion) and, in YAML, only what ranges expand to: enough to refuse a
    file that would take Ansible minutes to expand, before Ansible sees it.
    """
    hosts = 0
    in_vars = False
    for number, line in enumerate(source.text.splitlines(), start=1):
        if len(line) > MAX_LINE_CHARS:
            raise SourceError(
                f"inventory {source.path}:{number} is a line of {len(line)} characters (at "
                f"most {MAX_LINE_CHARS}); no host name or variable line is that long."
            )
        stripped = line.strip()
        if source.is_yaml:
            hosts += _range_product(stripped)
        elif stripped.startswith("["):
            _check_ini_section(source.path, number, stripped)
            in_vars = stripped.split("]", 1)[0].endswith(":vars")
        elif stripped and not stripped.startswith(("#", ";")) and not in_vars:
            hosts += max(1, _range_product(stripped.split(None, 1)[0]))
        if hosts > MAX_HOSTS:
            raise SourceError(
                f"inventory {source.path}:{number}: the file defines more than {MAX_HOSTS} "
                "hosts (host ranges expanded); check the range bounds (e.g. node[01:64]) or "
                "split the fleet into several inventories."
            )


def _range_product(line: str) -> int:
    """How many names the ranges on one line expand to (1 when there are none)."""
    total = 0
    for match in _RANGE_RE.finditer(line):
        start, end, step = match.group(1), match.group(2), int(match.group(3) or 1)
        if start.isdigit() != end.isdigit():
            continue
        low, high = (int(start), int(end)) if start.isdigit() else (ord(start), ord(end))
        count = max(0, high - low) // max(step, 1) + 1
        total = count if total == 0 else total * count
    return total


def _check_ini_section(path: Path, number: int, stripped: str) -> None:
    """An unclosed ``[section`` otherwise surfaces as Ansible's 'not enough values to unpack'."""
    if not _INI_SECTION_RE.match(stripped):
        raise SourceError(
            f"inventory {path}:{number}: {stripped[:60]!r} is not a section header; "
            "write it as [group], [group:vars] or [group:children]."
        )


def yaml_too_large(text: str) -> bool:
    """True when the document's aliases expand to more than ``MAX_YAML_NODES`` values.

    A YAML syntax error is not judged here: the caller's parser reports it with its position.
    """
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return False
    return root is not None and _expanded_size(root) > MAX_YAML_NODES


def _check_yaml_expansion(path: Path, text: str) -> None:
    """Count the nodes the document has once its aliases are expanded (an alias bomb's size)."""
    if yaml_too_large(text):
        raise SourceError(
            f"inventory {path}: its YAML aliases expand to more than {MAX_YAML_NODES} "
            "values (an alias bomb); write the values out or use group vars."
        )


def _expanded_size(root: yaml.Node) -> int:
    """Nodes after alias expansion, each distinct node sized once (linear in the file).

    A post-order walk: a node's size is known once all its children's are; a node met
    again while its own walk is in progress (a recursive alias) counts as one.
    """
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes and not children_done:
            continue
        if not children_done:
            sizes[id(node)] = 1
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(child), 1) for child in _children(node))
        sizes[id(node)] = min(total, MAX_YAML_NODES + 1)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
