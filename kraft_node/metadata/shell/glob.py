"""Paths and globs over the metadata tree (Kafka's ``CommandUtils`` path helpers, ``GlobComponent``
and ``GlobVisitor``).

A path is split on ``/`` (repeated and trailing slashes mean nothing), ``.`` and ``..`` are
resolved textually (``..`` of the root is the root), and each remaining component is matched
on its own: a *literal* component is looked up with ``child(name)`` (so a name the directory
does not list, such as a topic id under ``byId``, still resolves), a *glob* component (``*``,
``?``, ``{a,b}``; ``\\`` escapes) is matched against the directory's sorted child names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kraft_node.metadata.shell.node import MetadataNode

__all__ = ["GlobComponent", "MetadataNodeInfo", "split_path", "strip_dot_path_components", "visit_glob"]

#: characters that mean something in a Python (or Java) regular expression and must be escaped
_REGEX_SPECIAL = frozenset("$()+.[]^{|")
#: characters that mean something in a glob, so that ``\\`` before them makes them literal
_GLOB_SPECIAL = frozenset("*?\\{}")


def split_path(path: str) -> list[str]:
    """The non-empty components of ``path`` (``//alpha/beta/`` -> ``["alpha", "beta"]``)."""
    return [c for c in path.split("/") if c]


def strip_dot_path_components(components: list[str]) -> list[str]:
    """``.`` dropped, ``..`` removing the component before it (none before: stays at the root)."""
    out: list[str] = []
    for c in components:
        if c == "..":
            if out:
                out.pop()
        elif c != ".":
            out.append(c)
    return out


class GlobComponent:
    """One path component, as a glob.  ``literal`` when it can only match itself (no special
    character, or a malformed glob such as a nested or unterminated ``{`` group, which Kafka
    also takes literally)."""

    __slots__ = ("component", "_pattern")

    def __init__(self, component: str) -> None:
        self.component = component
        try:
            regex = self.to_regular_expression(component)
        except ValueError:
            regex = None
        self._pattern = re.compile(regex) if regex is not None else None

    @property
    def literal(self) -> bool:
        return self._pattern is None

    def matches(self, name: str) -> bool:
        if self._pattern is None:
            return name == self.component
        return self._pattern.match(name) is not None

    @staticmethod
    def to_regular_expression(glob: str) -> str | None:
        """The anchored regular expression for ``glob``, or None when it is a literal.
        ValueError for a nested or unterminated ``{`` group."""
        out = ["^"]
        literal = True
        in_group = False
        i = 0
        while i < len(glob):
            c = glob[i]
            i += 1
            if c == "?":
                literal = False
                out.append(".")
            elif c == "*":
                literal = False
                out.append(".*")
            elif c == "\\":
                if i == len(glob):
                    out.append(c)
                else:
                    nxt = glob[i]
                    i += 1
                    if nxt in _GLOB_SPECIAL or nxt in _REGEX_SPECIAL:
                        out.append("\\")
                    out.append(nxt)
            elif c == "{":
                if in_group:
                    raise ValueError("Can't nest glob groups.")
                literal = False
                in_group = True
                out.append("(?:(?:")
            elif c == "," and in_group:
                out.append(")|(?:")
            elif c == "}" and in_group:
                in_group = False
                out.append("))")
            else:
                if c in _REGEX_SPECIAL:
                    out.append("\\")
                out.append(c)
        if in_group:
            raise ValueError("Unterminated glob group.")
        if literal:
            return None
        out.append("$")
        return "".join(out)

    def __repr__(self) -> str:
        return f"GlobComponent({self.component!r})"


@dataclass(frozen=True)
class MetadataNodeInfo:
    """A node a glob reached, and the path (components from the root) it was reached by."""
    path: tuple[str, ...]
    node: MetadataNode

    def last_path_component(self) -> str:
        return self.path[-1] if self.path else "/"

    def absolute_path(self) -> str:
        return "/" + "/".join(self.path)


def visit_glob(glob: str, root: MetadataNode, working_directory: str) -> list[MetadataNodeInfo]:
    """Every node ``glob`` names (relative globs start at ``working_directory``), in sorted path
    order; empty when it names none."""
    full = glob if glob.startswith("/") else f"{working_directory}/{glob}"
    components = strip_dot_path_components(split_path(full))
    found: list[MetadataNodeInfo] = []
    _visit(components, 0, root, (), found)
    return found


def _visit(components: list[str], index: int, node: MetadataNode, path: tuple[str, ...],
           found: list[MetadataNodeInfo]) -> None:
    if index == len(components):
        found.append(MetadataNodeInfo(path, node))
        return
    if not node.is_directory():
        return
    component = GlobComponent(components[index])
    if component.literal:
        child = node.child(component.component)
        if child is not None:
            _visit(components, index + 1, child, path + (component.component,), found)
        return
    for name in sorted(node.child_names()):
        if component.matches(name):
            child = node.child(name)
            if child is None:
                raise LookupError(f"Expected {name} to be a valid child of {type(node).__name__}, but it was not.")
            _visit(components, index + 1, child, path + (name,), found)
