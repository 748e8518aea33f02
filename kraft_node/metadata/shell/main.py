"""``kraft-metadata-shell``: browse a cluster's metadata as a file system (Kafka's ``kafka-metadata-shell``).

    kraft-metadata-shell --snapshot FILE [--at-offset N] [COMMAND ...]
    kraft-metadata-shell --directory DIR [--at-offset N] [COMMAND ...]

``--snapshot`` takes a ``.checkpoint`` snapshot or a ``.log`` segment (as Kafka's shell does);
``--directory`` a ``__cluster_metadata-0`` directory or the log directory holding it (its
snapshots and segments together: the newest snapshot, then the log after it).  The records are
replayed into a metadata image, control records skipped, transactions respected (a transaction
still open at the end is left out, and stderr says so).

With no COMMAND the shell is interactive (history, Tab completion of commands and paths);
with one, it runs it, prints to stdout, complaints to stderr, and exits 1 if there were any.

Beyond Kafka: ``--at-offset N`` shows the image as of offset N (the newest snapshot at or below
N, then the log up to N), and the ``diff FROM [TO]`` command prints the records that turn one
offset's image into another's.

A log directory that a running node has locked (its ``.lock``) is refused, as Kafka's shell
refuses it: the shell takes a shared lock, so shells can read together but not beside a node.
Errors are one line (``Error: ...``), never a traceback.
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import os
import sys
from pathlib import Path
from typing import TextIO

from kraft_node.metadata.image.time_travel import METADATA_PARTITION_DIR, MetadataHistory, MetadataHistoryError
from kraft_node.metadata.shell.commands import CommandIO, Commands, MetadataShellState
from kraft_node.metadata.shell.image_nodes import RootShellNode
from kraft_node.metadata.shell.interactive import InteractiveShell

__all__ = ["ShellError", "main"]

_LOCK_FILE = ".lock"


class ShellError(Exception):
    """A failure to report as ``Error: <message>`` (Kafka's TerseFailure)."""


def _log_dir_of(path: Path) -> Path:
    """The log directory that would hold the node's ``.lock``: the parent of
    ``__cluster_metadata-0`` (for a file, its directory's parent, as Kafka's ``parentParent``)."""
    p = path.resolve()
    if p.is_dir():
        if (p / METADATA_PARTITION_DIR).is_dir():
            return p
        return p.parent
    return p.parent.parent


def _lock_if_exists(log_dir: Path) -> int | None:
    """A shared lock on ``log_dir/.lock`` when the file exists (an fd to keep open), else None.
    Read-only: the file is neither created nor written."""
    path = log_dir / _LOCK_FILE
    if not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ShellError(f"Unable to lock {log_dir}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ShellError(f"Unable to lock {log_dir}. Please ensure that no broker or controller process is "
                             "using this directory before proceeding.") from None
        raise ShellError(f"Unable to lock {log_dir}: {exc.strerror or exc}") from None
    return fd


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kraft-metadata-shell", description="The Apache Kafka metadata shell (kraft).")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", "-s", help="The snapshot file to read (a .checkpoint, or a .log segment).")
    source.add_argument("--directory", "-d",
                        help="A __cluster_metadata-0 directory, or the log directory holding it.")
    p.add_argument("--at-offset", type=int, metavar="N",
                   help="Show the image as of offset N (the record at N included).")
    p.add_argument("command", nargs=argparse.REMAINDER, help="The command to run (none: interactive).")
    return p


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Open the source, load the image, then run the shell or the one command; the exit code."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    source = Path(args.snapshot if args.snapshot is not None else args.directory)
    if args.directory is not None and source.exists() and not source.is_dir():
        raise ShellError(f"{source}: not a directory (use --snapshot for a file)")
    if args.snapshot is not None and source.is_dir():
        raise ShellError(f"{source}: is a directory (use --directory for a directory)")
    interactive = not args.command
    lock = _lock_if_exists(_log_dir_of(source)) if source.exists() else None
    try:
        history = MetadataHistory.open(source)
        if interactive:
            out.write("Loading...\n")
            out.flush()
        loaded = history.load(args.at_offset)
        for note in loaded.notes:
            err.write(f"Note: {note}\n")
        state = MetadataShellState(RootShellNode(loaded.image), "/", history)
        if interactive:
            out.write("Starting...\n")
            out.flush()
            return InteractiveShell(state, stdout=out if stdout is not None else None,
                                    stderr=err if stderr is not None else None).run_main_loop()
        io = CommandIO(out, err)
        Commands(False).parse_command(args.command).run(None, io, state)
        return 1 if io.failed else 0
    finally:
        if lock is not None:
            os.close(lock)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command[:1] == ["--"]:  # ``kraft-metadata-shell -d D -- ls -x``: the separator is not a word
        args.command = args.command[1:]
    try:
        rc = run(args)
        sys.stdout.flush()
        return rc
    except (ShellError, MetadataHistoryError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (``| head``): nothing more to say, and nowhere to say it
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a one-line message, never a traceback
        print(f"Unexpected error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
