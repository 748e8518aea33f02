"""The metadata tree the shell walks (Kafka's ``org.apache.kafka.image.node.MetadataNode``) and its printers.

Why a tree of nodes and not the image itself: the shell's commands (``ls``, ``cd``, ``cat``,
``tree``, ``find``) only need three things of any place in the image -- is it a directory, what
are its children's names, give me the child called X -- and a way to print it.  The nodes are
thin views made on demand over the immutable image: building ``/image/topics/byName`` does not
touch a single topic until one is asked for, so a shell over a 1M-partition image starts at
once.

Printing goes through a :class:`MetadataNodePrinter` (Kafka's visitor): a directory's default
``print`` enters each child in name order and prints it; a leaf outputs its text.  The printer
decides the layout (:class:`ShellNodePrinter`: ``name:`` lines indented two spaces a level;
:class:`NodeStringifier`: ``name(child, ...)`` on one line) and what is secret
(:class:`RedactionCriteria`: the shell shows everything, as Kafka's shell does; a stringifier
redacts everything unless told otherwise).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TextIO

__all__ = [
    "MetadataLeafNode", "MetadataNode", "MetadataNodePrinter", "NodeStringifier", "RedactionCriteria",
    "ShellNodePrinter",
]


class RedactionCriteria:
    """What a printer hides (Kafka's ``MetadataNodeRedactionCriteria``): SCRAM credentials,
    delegation tokens, and config values (by resource type name and key).

    ``STRICT`` hides all three, ``DISABLED`` none (the shell: its user reads the files anyway);
    ``normal(is_sensitive)`` hides the secrets and the config values ``is_sensitive(type, key)``
    names (Kafka's ``Normal`` over a config schema).
    """

    __slots__ = ("scram", "delegation_token", "_config")

    STRICT: RedactionCriteria
    DISABLED: RedactionCriteria

    def __init__(self, scram: bool, delegation_token: bool, config: Callable[[str, str], bool]) -> None:
        self.scram = scram
        self.delegation_token = delegation_token
        self._config = config

    @classmethod
    def normal(cls, is_sensitive: Callable[[str, str], bool]) -> RedactionCriteria:
        return cls(True, True, is_sensitive)

    def should_redact_scram(self) -> bool:
        return self.scram

    def should_redact_delegation_token(self) -> bool:
        return self.delegation_token

    def should_redact_config(self, resource_type: str, key: str) -> bool:
        return self._config(resource_type, key)


RedactionCriteria.STRICT = RedactionCriteria(True, True, lambda _type, _key: True)
RedactionCriteria.DISABLED = RedactionCriteria(False, False, lambda _type, _key: False)


class MetadataNodePrinter(Protocol):
    """A visitor that lays out nodes: ``enter_node(name)`` ... ``leave_node()`` around a child,
    ``output(text)`` for a leaf's text."""

    def redaction_criteria(self) -> RedactionCriteria: ...

    def enter_node(self, name: str) -> None: ...

    def leave_node(self) -> None: ...

    def output(self, text: str) -> None: ...


class MetadataNode:
    """A place in the tree.  The defaults make an empty directory; subclasses override.

    Invariant the commands rely on: every name ``child_names()`` gives is accepted by
    ``child(name)`` (``find`` and globs walk the names and fail loudly otherwise), and a leaf
    (``is_directory()`` false) has no children.
    """

    __slots__ = ()

    def is_directory(self) -> bool:
        return True

    def child_names(self) -> Iterable[str]:
        return ()

    def child(self, name: str) -> MetadataNode | None:
        return None

    def print(self, printer: MetadataNodePrinter) -> None:
        """Each child in name order, entered and printed (a directory's default)."""
        for name in sorted(self.child_names()):
            child = self.child(name)
            if child is None:
                raise LookupError(f"{type(self).__name__} lists a child {name!r} that it does not have")
            printer.enter_node(name)
            child.print(printer)
            printer.leave_node()

    def stringify(self, criteria: RedactionCriteria | None = None) -> str:
        """The node on one line (Kafka's ``stringify()``; strict redaction unless told otherwise)."""
        s = NodeStringifier(criteria if criteria is not None else RedactionCriteria.STRICT)
        self.print(s)
        return str(s)


class MetadataLeafNode(MetadataNode):
    """A file whose content is a fixed text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def is_directory(self) -> bool:
        return False

    def print(self, printer: MetadataNodePrinter) -> None:
        printer.output(self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetadataLeafNode) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"MetadataLeafNode({self.text!r})"


class ShellNodePrinter:
    """The shell's layout (``cat``, ``tree``): ``name:`` on a line, its content two spaces deeper.
    Nothing is redacted: the shell reads the files directly, so hiding would protect nothing."""

    def __init__(self, out: TextIO, criteria: RedactionCriteria | None = None) -> None:
        self._out = out
        self._level = 0
        self._criteria = criteria if criteria is not None else RedactionCriteria.DISABLED

    def redaction_criteria(self) -> RedactionCriteria:
        return self._criteria

    def enter_node(self, name: str) -> None:
        self._out.write(f"{'  ' * self._level}{name}:\n")
        self._level += 1

    def leave_node(self) -> None:
        self._level -= 1

    def output(self, text: str) -> None:
        self._out.write(f"{'  ' * self._level}{text}\n")


class NodeStringifier:
    """One line: ``a(x), b(c(y, z))`` (Kafka's ``NodeStringifier``; used in logs and tests).

    The separator stack holds, per open level, what goes before the next item: nothing before
    the first, ``", "`` after it."""

    def __init__(self, criteria: RedactionCriteria | None = None) -> None:
        self._criteria = criteria if criteria is not None else RedactionCriteria.STRICT
        self._parts: list[str] = []
        self._separators: list[str] = [""]

    def redaction_criteria(self) -> RedactionCriteria:
        return self._criteria

    def enter_node(self, name: str) -> None:
        self._parts.append(self._separators.pop())
        self._separators.append(", ")
        self._parts.append(f"{name}(")
        self._separators.append("")

    def leave_node(self) -> None:
        self._parts.append(")")
        self._separators.pop()

    def output(self, text: str) -> None:
        self._parts.append(self._separators.pop())
        self._parts.append(text)
        self._separators.append(", ")

    def __str__(self) -> str:
        return "".join(self._parts)
