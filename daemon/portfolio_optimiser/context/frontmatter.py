"""Read a concept file: UTF-8 text, optional YAML frontmatter, markdown body.

Frontmatter is parsed with a *safe* loader narrowed further: no language-specific tags (``!!python/…``
is refused, not ignored), no anchors or aliases (a few lines of aliases can expand into gigabytes),
and no implicit timestamps (``2027-03-01`` stays the string the planner wrote). A UTF-8 byte order
mark and CRLF line ends, which ordinary editors produce, are accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import BundleError, FrontmatterError

__all__ = [
    "Concept",
    "decode_text",
    "dump_frontmatter",
    "parse_concept",
    "read_concept",
    "split_frontmatter",
]

MAX_FRONTMATTER_BYTES = 64 * 1024
_FENCE = re.compile(r"^---[ \t]*$")


# libyaml's parser where the wheel carries it (six times faster on frontmatter); same rules either way.
_SafeBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# And its emitter (five times faster: the YAML of a promoted verdict's page was half of its
# promotion). It folds a long quoted string at another place than PyYAML's own; both read back
# to the same values.
_SafeDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_frontmatter(data: Mapping[str, Any]) -> str:
    """A frontmatter block's YAML (without its fences), in the mapping's order."""
    return str(
        yaml.dump(dict(data), Dumper=_SafeDumper, sort_keys=False, allow_unicode=True, width=100)
    )


class _ConceptLoader(_SafeBase):  # type: ignore[misc]
    """A safe loader without aliases, duplicate keys or implicit timestamps."""

    def construct_document(self, node: Any) -> Any:
        # An alias is one node reached twice; a few lines of them can expand into gigabytes.
        seen: set[int] = set()
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, yaml.ScalarNode):
                continue
            if id(current) in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, "YAML aliases (*name) are not allowed", current.start_mark
                )
            seen.add(id(current))
            children = current.value
            if isinstance(current, yaml.MappingNode):
                stack.extend(n for pair in children for n in pair)
            else:
                stack.extend(children)
        return super().construct_document(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        # PyYAML keeps the last of two equal keys; a planner who wrote amount_nok twice meant one.
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = key_node.value
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice; keep one", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_ConceptLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _SafeBase.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True)
class Concept:
    """One markdown file of a bundle, as read."""

    rel: str
    """Bundle-relative POSIX path, e.g. ``cost/02-bygning/02.3.md``."""
    frontmatter: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    body_line: int = 1
    """The file line on which the body starts, so a link can be reported by its line."""

    @property
    def id(self) -> str:
        """OKF concept id: the path without ``.md``."""
        return self.rel[:-3] if self.rel.endswith(".md") else self.rel

    @property
    def type(self) -> str | None:
        value = self.frontmatter.get("type")
        return value if isinstance(value, str) and value.strip() else None

    @property
    def title(self) -> str:
        value = self.frontmatter.get("title") or self.frontmatter.get("name")
        return str(value) if value is not None else Path(self.rel).stem


def decode_text(data: bytes, where: str) -> str:
    """UTF-8 text with a BOM removed and line ends normalised; a clear error otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BundleError(
            f"{where} line {line}: byte 0x{data[exc.start]:02x} is not valid UTF-8; "
            "save the file as UTF-8 and drop it again"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" not in text:
        return text  # the usual case: a file of thousands of lines is not scanned twice more
    return text.replace("\r\n", "\n").replace("\r", "\n")


def split_frontmatter(text: str, where: str) -> tuple[dict[str, Any], str, int]:
    """Return (frontmatter, body, body_line). A file without a leading ``---`` has none."""
    lines = text.split("\n")
    if not lines or not _FENCE.match(lines[0]):
        return {}, text, 1
    for end in range(1, len(lines)):
        if _FENCE.match(lines[end]):
            break
    else:
        raise FrontmatterError(
            f"{where} line 1: frontmatter starts with '---' but never ends; "
            "add a closing '---' line after the last key"
        )
    source = "\n".join(lines[1:end])
    if len(source.encode("utf-8")) > MAX_FRONTMATTER_BYTES:
        raise FrontmatterError(
            f"{where}: frontmatter is larger than {MAX_FRONTMATTER_BYTES // 1024} KiB; "
            "move the long text into the body"
        )
    data = _load_yaml(source, where)
    body = "\n".join(lines[end + 1 :])
    return data, body, end + 2


def _load_yaml(source: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.load(source, Loader=_ConceptLoader)
    except yaml.constructor.ConstructorError as exc:
        line = _file_line(exc.problem_mark)
        tag = re.search(r"for the tag '([^']*)'", str(exc.problem or ""))
        if tag:
            shown = tag.group(1).replace("tag:yaml.org,2002:", "!!")
            raise FrontmatterError(
                f"{where} line {line}: the YAML tag {shown} is not allowed in frontmatter; "
                "remove the tag and write a plain value"
            ) from None
        problem = str(exc.problem)
        advice = "" if ";" in problem else "; write plain keys and values"
        raise FrontmatterError(f"{where} line {line}: {problem}{advice}") from None
    except yaml.MarkedYAMLError as exc:
        # Where the broken construct began (an unclosed bracket or quote) is where to look;
        # the problem mark is often the end of the text, where the parser gave up.
        line = _file_line(exc.context_mark or exc.problem_mark)
        raise FrontmatterError(
            f"{where} line {line}: frontmatter is not valid YAML ({exc.problem}); "
            "check quotes, colons and indentation on that line"
        ) from None
    except yaml.YAMLError as exc:
        raise FrontmatterError(f"{where}: frontmatter is not valid YAML ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FrontmatterError(
            f"{where} line 2: frontmatter must be a mapping of 'key: value' lines, "
            f"not a {_yaml_kind(data)}; write e.g. 'type: cost-line'"
        )
    bad = [key for key in data if not isinstance(key, str)]
    if bad:
        raise FrontmatterError(
            f"{where}: frontmatter key {bad[0]!r} is not text; quote it or rename it"
        )
    return data


def _file_line(mark: Any) -> int:
    # +2: the frontmatter starts on file line 2, and marks count from zero.
    return int(mark.line) + 2 if mark is not None else 2


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "plain string"
    return type(value).__name__


def parse_concept(data: bytes, rel: str) -> Concept:
    """Parse the bytes of a bundle file named by its bundle-relative path ``rel``."""
    text = decode_text(data, rel)
    frontmatter, body, body_line = split_frontmatter(text, rel)
    return Concept(rel=rel, frontmatter=frontmatter, body=body, body_line=body_line)


def read_concept(path: Path, rel: str) -> Concept:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BundleError(
            f"{rel}: cannot be read ({exc.strerror}); check its permissions"
        ) from None
    return parse_concept(data, rel)
