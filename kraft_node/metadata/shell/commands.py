"""The metadata shell's commands (Kafka's ``org.apache.kafka.shell.command``), their parser and completion.

Why parsing yields handler *values*: a command line becomes a frozen dataclass (``LsCommand(("a",
"b"))``, ``ErroneousCommand("invalid choice: ...")``), so what a line means is testable apart from
what running it prints -- Kafka's ``CommandTest`` compares handlers the same way.  Running a handler
writes its output to ``io.out`` and its complaints to ``io.err`` (and marks ``io.failed``, which
the one-command mode turns into a non-zero exit; Kafka prints both to stdout and exits 0).

Commands (Kafka's, plus ``diff``): ``cat``, ``cd``, ``diff``, ``exit``, ``find``, ``help``,
``history``, ``ls``, ``man``, ``pwd``, ``tree``.  ``cd``, ``exit``, ``help``, ``history``,
``man`` and ``pwd`` exist only in the interactive shell; given on the command line they are
invalid choices, as in Kafka.  A unique prefix of a command is refused with "did you mean"
(Kafka's argparse4j resolves prefixes and the shell then refuses them).

Paths and globs: see :mod:`.glob`.  Output layouts are Kafka's: ``ls`` in columns fitted to the
terminal width (one column without a terminal), ``tree`` and ``cat`` through
:class:`~.node.ShellNodePrinter`, ``find`` one path a line, ``history`` as ``% 5d  line``.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn, Protocol, TextIO

from kraft_node.metadata.image.time_travel import (
    DiffError,
    MetadataHistory,
    MetadataHistoryError,
    diff,
    records_json,
)
from kraft_node.metadata.shell.glob import split_path, strip_dot_path_components, visit_glob
from kraft_node.metadata.shell.node import MetadataNode, ShellNodePrinter
from kraft_node.metadata.shell.text import record_text

__all__ = [
    "COMMAND_TYPES", "Candidate", "CatCommand", "CdCommand", "CommandIO", "Commands", "DiffCommand",
    "ErroneousCommand", "ExitCommand", "FindCommand", "HelpCommand", "HistoryCommand", "LsCommand", "ManCommand",
    "MetadataShellState", "NoOpCommand", "PwdCommand", "ShellExit", "TreeCommand", "complete_command",
    "complete_line", "complete_path", "effective_paths",
]


# ---------------------------------------------------------------------------------------------
# State, output, the shell seen from a command
# ---------------------------------------------------------------------------------------------

@dataclass
class MetadataShellState:
    """What the commands work on: the tree's root and the working directory (an absolute path).
    ``history``: where the image came from, for ``diff`` (None: a tree built in memory)."""
    root: MetadataNode
    working_directory: str = "/"
    history: MetadataHistory | None = None


@dataclass
class CommandIO:
    """Where a command writes; ``failed`` is set by any complaint written to ``err``."""
    out: TextIO
    err: TextIO
    failed: bool = False

    def error(self, message: str) -> None:
        self.err.write(message + "\n")
        self.failed = True


class InteractiveShellLike(Protocol):
    """What a command may ask of the interactive shell running it."""

    def screen_width(self) -> int | None: ...

    def history(self, entries: int) -> list[tuple[int, str]]: ...


class ShellExit(Exception):
    """The ``exit`` command: the interactive loop ends."""


# ---------------------------------------------------------------------------------------------
# Paths, completion
# ---------------------------------------------------------------------------------------------

def effective_paths(paths: Sequence[str]) -> list[str]:
    """The non-empty paths given, or ``.`` when none (Kafka's ``getEffectivePaths``)."""
    out = [p for p in paths if p]
    return out or ["."]


@dataclass(frozen=True)
class Candidate:
    """A completion: ``value`` replaces the word; ``complete`` means nothing more can follow it
    (a command or a file: the line editor adds a space; a directory ends in ``/`` instead)."""
    value: str
    complete: bool = True


def complete_command(prefix: str) -> list[Candidate]:
    return [Candidate(name) for name in sorted(COMMAND_TYPES) if name.startswith(prefix)]


def complete_path(state: MetadataShellState, prefix: str) -> list[Candidate]:
    """The children of the directory ``prefix`` is in whose names start with its last component,
    each as ``prefix``'s directory part + name (+ ``/`` for a directory)."""
    absolute = prefix if prefix.startswith("/") else f"{state.working_directory}/{prefix}"
    components = strip_dot_path_components(split_path(absolute))
    directories = len(components) if prefix.endswith("/") else len(components) - 1
    node = state.root
    for i in range(max(directories, 0)):
        child = node.child(components[i])
        if child is None or not child.is_directory():
            return []
        node = child
    last = components[directories] if 0 <= directories < len(components) else ""
    slash = prefix.rfind("/")
    head = "" if slash < 0 else prefix[:slash + 1]
    out: list[Candidate] = []
    for name in sorted(node.child_names()):
        if not name.startswith(last):
            continue
        child = node.child(name)
        if child is not None and child.is_directory():
            out.append(Candidate(f"{head}{name}/", False))
        else:
            out.append(Candidate(f"{head}{name}", True))
    return out


def complete_line(state: MetadataShellState, words: Sequence[str]) -> list[Candidate]:
    """Completions of the last of ``words`` (the line up to the cursor, split on blanks, with an
    empty last word when the cursor follows a blank)."""
    if not words:
        return complete_command("")
    if len(words) == 1:
        return complete_command(words[0])
    ctype = COMMAND_TYPES.get(words[0])
    if ctype is None:
        return []
    return ctype.complete_next(state, list(words[1:]))


# ---------------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------------

class Handler(Protocol):
    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None: ...


@dataclass(frozen=True)
class NoOpCommand:
    """An empty line (or a help screen already shown)."""

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        return None


@dataclass(frozen=True)
class ErroneousCommand:
    """A line that does not parse: running it reports ``message``."""
    message: str

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        io.error(self.message)


@dataclass(frozen=True)
class CatCommand:
    targets: tuple[str, ...]

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        for target in self.targets:
            found = visit_glob(target, state.root, state.working_directory)
            if not found:
                io.error(f"cat: {target}: No such file or directory.")
            for info in found:
                if info.node.is_directory():
                    io.error(f"cat: {target}: Is a directory")
                else:
                    info.node.print(ShellNodePrinter(io.out))


@dataclass(frozen=True)
class TreeCommand:
    targets: tuple[str, ...]

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        for target in self.targets:
            found = visit_glob(target, state.root, state.working_directory)
            if not found:
                io.error(f"tree: {target}: No such file or directory.")
            for info in found:
                info.node.print(ShellNodePrinter(io.out))


@dataclass(frozen=True)
class CdCommand:
    target: str | None = None

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        target = self.target if self.target is not None else "/"
        found = visit_glob(target, state.root, state.working_directory)
        if not found:
            io.error(f"cd: {target}: no such directory.")
        for info in found:
            if not info.node.is_directory():
                io.error(f"cd: {target}: not a directory.")
            else:
                state.working_directory = info.absolute_path()


@dataclass(frozen=True)
class PwdCommand:
    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        io.out.write(state.working_directory + "\n")


@dataclass(frozen=True)
class ExitCommand:
    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        raise ShellExit()


@dataclass(frozen=True)
class FindCommand:
    paths: tuple[str, ...] = ()

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        for path in effective_paths(self.paths):
            found = visit_glob(path, state.root, state.working_directory)
            if not found:
                io.error(f"find: {path}: no such file or directory.")
            for info in found:
                self._find(io.out, path, info.node)

    def _find(self, out: TextIO, path: str, node: MetadataNode) -> None:
        out.write(path + "\n")
        if not node.is_directory():
            return
        for name in sorted(node.child_names()):
            child = node.child(name)
            if child is None:
                raise LookupError(f"Expected {name} to be a valid child of {path}, but it was not.")
            self._find(out, path + name if path == "/" else f"{path}/{name}", child)


@dataclass(frozen=True)
class HelpCommand:
    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        io.out.write("Welcome to the Apache Kafka metadata shell.\n\n")
        io.out.write(Commands(True).format_help())


@dataclass(frozen=True)
class ManCommand:
    cmd: str

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        ctype = COMMAND_TYPES.get(self.cmd)
        if ctype is None:
            io.error(f"man: unknown command {self.cmd}. Type help to get a list of commands.")
            return
        io.out.write(f"{self.cmd}: {ctype.description}\n\n")
        io.out.write(ctype.parser().format_help())


@dataclass(frozen=True)
class HistoryCommand:
    num_entries_to_show: int = 2**31 - 1

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        if shell is None:
            io.error("The history command requires a shell.")
            return
        for index, line in shell.history(self.num_entries_to_show):
            io.out.write(f"{index:5d}  {line}\n")


@dataclass(frozen=True)
class TargetDirectory:
    name: str
    children: tuple[str, ...]


@dataclass(frozen=True)
class ColumnSchema:
    """How ``ls`` lays out entries: ``column_widths`` (each includes two spaces of padding) and
    how many entries go down each column."""
    column_widths: tuple[int, ...]
    entries_per_column: int

    @property
    def num_columns(self) -> int:
        return len(self.column_widths)

    def total_width(self) -> int:
        return sum(self.column_widths)


def calculate_column_schema(screen_width: int | None, entries: Sequence[str]) -> ColumnSchema:
    """The most columns (up to width/4) whose last column is used and whose total width fits
    the screen; one column without a screen (Kafka's ``calculateColumnSchema``)."""
    n = len(entries)
    if n == 0 or screen_width is None or screen_width // 4 <= 1:
        return ColumnSchema((0,), n)
    for columns in range(screen_width // 4, 1, -1):
        per_column = (n + columns - 1) // columns
        widths = [0] * columns
        for i, entry in enumerate(entries):
            c = i // per_column
            widths[c] = max(widths[c], len(entry) + 2)
        if widths[-1] != 0 and sum(widths) <= screen_width:
            return ColumnSchema(tuple(widths), per_column)
    widths1 = max((len(e) + 2 for e in entries), default=0)
    return ColumnSchema((widths1,), n)


def print_entries(out: TextIO, intro: str, screen_width: int | None, entries: Sequence[str]) -> None:
    if not entries:
        return
    if intro:
        out.write(intro + "\n")
    schema = calculate_column_schema(screen_width, entries)
    lines = (len(entries) + schema.num_columns - 1) // schema.num_columns
    for line in range(lines):
        parts = []
        for column in range(schema.num_columns):
            i = line + column * schema.entries_per_column
            if i < len(entries):
                entry = entries[i]
                parts.append(entry)
                if column < schema.num_columns - 1:
                    parts.append(" " * (schema.column_widths[column] - len(entry)))
        out.write("".join(parts) + "\n")


def print_targets(out: TextIO, screen_width: int | None, files: Sequence[str],
                  directories: Sequence[TargetDirectory]) -> None:
    """Files first (no heading), then each directory's children, headed ``name:`` when there is
    more than one thing listed, with a blank line between groups."""
    print_entries(out, "", screen_width, files)
    need_intro = bool(files) or len(directories) > 1
    first_intro = not files
    for d in directories:
        intro = ""
        if need_intro:
            intro = ("" if first_intro else "\n") + d.name + ":"
            first_intro = False
        print_entries(out, intro, screen_width, d.children)


@dataclass(frozen=True)
class LsCommand:
    targets: tuple[str, ...] = ()

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        files: list[str] = []
        directories: list[TargetDirectory] = []
        for target in effective_paths(self.targets):
            found = visit_glob(target, state.root, state.working_directory)
            if not found:
                io.error(f"ls: {target}: no such file or directory.")
            for info in found:
                if info.node.is_directory():
                    directories.append(TargetDirectory(info.last_path_component(),
                                                       tuple(sorted(info.node.child_names()))))
                else:
                    files.append(info.last_path_component())
        print_targets(io.out, shell.screen_width() if shell is not None else None, files, directories)


@dataclass(frozen=True)
class DiffCommand:
    """The records that turn the image at ``from_offset`` into the image at ``to_offset`` (default:
    the image the shell shows), one per line: JSON as ``kraft-dump-log --json`` prints a metadata
    record, or Kafka's record ``toString`` with ``text``."""
    from_offset: int
    to_offset: int | None = None
    text: bool = False

    def run(self, shell: InteractiveShellLike | None, io: CommandIO, state: MetadataShellState) -> None:
        history = state.history
        if history is None:
            io.error("diff: this shell has no metadata log to read other offsets from")
            return
        to_offset = self.to_offset
        if to_offset is None:
            to_offset = _current_offset(state)
        try:
            a, b = history.load_many([self.from_offset, to_offset])
            records = diff(a.image, b.image)
        except (MetadataHistoryError, DiffError) as exc:
            io.error(f"diff: {exc}")
            return
        for note in a.notes + b.notes:
            io.err.write(f"diff: note: {note}\n")
        for r in records:
            if self.text:
                io.out.write(record_text(r.message) + "\n")
            else:
                io.out.write(json.dumps(records_json(r), separators=(",", ":")) + "\n")


def _current_offset(state: MetadataShellState) -> int | None:
    image_node = state.root.child("image")
    image = getattr(image_node, "image", None)
    offset = getattr(image, "offset", None)
    return offset if isinstance(offset, int) and offset >= 0 else None


# ---------------------------------------------------------------------------------------------
# Types and the parser
# ---------------------------------------------------------------------------------------------

class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing and exiting (a shell line is not a process)."""

    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(message)


@dataclass(frozen=True)
class CommandType:
    """A command: its name, one-line description, whether only the interactive shell has it, its
    arguments, how parsed arguments become a handler, and how its next word completes."""
    name: str
    description: str
    shell_only: bool
    add_arguments: Callable[[argparse.ArgumentParser], object]
    create_handler: Callable[[argparse.Namespace], Handler]
    completes_paths: bool = False
    completes_commands: bool = False
    #: complete only the first argument (cd, man)
    first_argument_only: bool = False

    def parser(self) -> _Parser:
        p = _Parser(prog=self.name, add_help=False, description=None)
        self.add_arguments(p)
        return p

    def complete_next(self, state: MetadataShellState, next_words: list[str]) -> list[Candidate]:
        if self.first_argument_only and len(next_words) != 1:
            return []
        if self.completes_paths:
            return complete_path(state, next_words[-1])
        if self.completes_commands:
            return complete_command(next_words[-1])
        return []


def _int_argument(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"could not convert '{text}' to Integer") from None


def _nothing(p: argparse.ArgumentParser) -> None:
    return None


def _diff_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("from_offset", metavar="FROM", type=_int_argument, help="The offset of the image to start from.")
    p.add_argument("to_offset", metavar="TO", type=_int_argument, nargs="?",
                   help="The offset of the image to reach (default: the image the shell shows).")
    p.add_argument("--text", action="store_true", help="Print Kafka's record toString instead of JSON.")


_TYPES: tuple[CommandType, ...] = (
    CommandType("cat", "Show the contents of metadata files.", False,
                lambda p: p.add_argument("targets", nargs="+", help="The metadata files to display."),
                lambda ns: CatCommand(tuple(ns.targets)), completes_paths=True),
    CommandType("cd", "Set the current working directory.", True,
                lambda p: p.add_argument("target", nargs="?", help="The directory to change to."),
                lambda ns: CdCommand(ns.target), completes_paths=True, first_argument_only=True),
    CommandType("diff", "Print the records that turn the image at one offset into the image at another.", False,
                _diff_arguments, lambda ns: DiffCommand(ns.from_offset, ns.to_offset, ns.text)),
    CommandType("exit", "Exit the metadata shell.", True, _nothing, lambda ns: ExitCommand()),
    CommandType("find", "Search for nodes in the directory hierarchy.", False,
                lambda p: p.add_argument("paths", nargs="*", help="The paths to start at."),
                lambda ns: FindCommand(tuple(ns.paths)), completes_paths=True),
    CommandType("help", "Display this help message.", True, _nothing, lambda ns: HelpCommand()),
    CommandType("history", "Print command history.", True,
                lambda p: p.add_argument("numEntriesToShow", nargs="?", type=_int_argument,
                                         help="The number of entries to show."),
                lambda ns: HistoryCommand(2**31 - 1 if ns.numEntriesToShow is None else ns.numEntriesToShow)),
    CommandType("ls", "List metadata nodes.", False,
                lambda p: p.add_argument("targets", nargs="*", help="The metadata node paths to list."),
                lambda ns: LsCommand(tuple(ns.targets)), completes_paths=True),
    CommandType("man", "Show the help text for a specific command.", True,
                lambda p: p.add_argument("cmd", nargs=1, help="The command to get help text for."),
                lambda ns: ManCommand(ns.cmd[0]), completes_commands=True, first_argument_only=True),
    CommandType("pwd", "Print the current working directory.", True, _nothing, lambda ns: PwdCommand()),
    CommandType("tree", "Show the contents of metadata nodes in a tree structure.", False,
                lambda p: p.add_argument("targets", nargs="+", help="The metadata nodes to display."),
                lambda ns: TreeCommand(tuple(ns.targets)), completes_paths=True),
)

#: every command by name (sorted, as completion lists them)
COMMAND_TYPES: dict[str, CommandType] = {t.name: t for t in sorted(_TYPES, key=lambda t: t.name)}


@dataclass
class Commands:
    """The command set of a mode: ``Commands(True)`` for the interactive shell, ``Commands(False)``
    for one command given on the command line (no shell-only commands)."""
    add_shell_commands: bool
    types: dict[str, CommandType] = field(init=False)

    SHELL_ONLY_HINT: ClassVar[str] = "only in the interactive shell"

    def __post_init__(self) -> None:
        self.types = {n: t for n, t in COMMAND_TYPES.items() if self.add_shell_commands or not t.shell_only}

    def format_help(self) -> str:
        names = ",".join(self.types)
        lines = [f"usage: {{{names}}} ...", "", "positional arguments:", f"  {{{names}}}"]
        for t in self.types.values():
            lines.append(f"    {t.name:<21}{t.description}")
        return "\n".join(lines) + "\n"

    def parse_command(self, arguments: Iterable[str]) -> Handler:
        """The handler for a command line (already split into words); never raises."""
        args = list(arguments)
        while args and args[-1] == "":
            args.pop()
        if not args:
            return NoOpCommand()
        name = args[0]
        ctype = self.types.get(name)
        if ctype is None:
            matches = [n for n in self.types if n.startswith(name)] if name else []
            if len(matches) == 1:
                return ErroneousCommand(f"invalid choice: '{name}': did you mean '{matches[0]}'?")
            if len(matches) > 1:
                return ErroneousCommand(f"ambiguous command: {name} could match {', '.join(matches)}")
            choices = ", ".join(f"'{n}'" for n in self.types)
            return ErroneousCommand(f"invalid choice: '{name}' (choose from {choices})")
        rest = args[1:]
        if "-h" in rest or "--help" in rest:
            return ManCommand(name)
        try:
            ns = ctype.parser().parse_args(rest)
        except _ArgumentError as exc:
            return ErroneousCommand(f"{name}: {exc}")
        return ctype.create_handler(ns)


def handler_name(handler: Any) -> str:
    """The command a handler runs, for messages (``LsCommand`` -> ``ls``)."""
    return type(handler).__name__.removesuffix("Command").lower()
