"""The interactive metadata shell (Kafka's ``InteractiveShell``): a prompt, line editing, history
and tab completion of commands and paths.

Why readline: it is what a Python user's terminal already speaks (the same keys as bash), and
Python's ``input()`` goes through it once the module is imported.  Completion follows Kafka's
completer: the first word completes to a command, later words to what that command takes
(paths for ``ls``/``cat``/``cd``/``tree``/``find``, commands for ``man``); a directory completes
with a trailing ``/`` so the next Tab goes on into it, a file or command with a space.

Without a terminal (commands piped in) the same loop reads lines, with no editing; the output is
the same.  Ctrl-C abandons the line (``^C``), Ctrl-D or ``exit`` ends the shell.
"""
from __future__ import annotations

import shlex
import shutil
import signal
import sys
import threading
from typing import Any, TextIO

from kraft_node.metadata.shell.commands import (
    CommandIO,
    Commands,
    ErroneousCommand,
    MetadataShellState,
    ShellExit,
    complete_line,
)

__all__ = ["InteractiveShell", "split_line"]


def split_line(line: str) -> list[str]:
    """The words of a command line: blanks separate, quotes group, ``\\`` escapes (as JLine's
    default parser).  ValueError for an unterminated quote."""
    return shlex.split(line, posix=True)


class InteractiveShell:
    """Runs the prompt loop over ``state``."""

    def __init__(self, state: MetadataShellState, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 stderr: TextIO | None = None) -> None:
        self.state = state
        self.stdin = stdin if stdin is not None else sys.stdin
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self._history: list[str] = []
        self._readline: Any = None
        self._candidates: list[str] = []
        if self.stdin is sys.stdin and self.stdin.isatty():
            self._readline = self._setup_readline()

    # -- what commands ask of the shell --------------------------------------------------------

    def screen_width(self) -> int | None:
        """The terminal's width for ``ls`` columns; None (one entry a line) when the output is not
        a terminal, so piped output stays one name a line."""
        try:
            if not self.stdout.isatty():
                return None
        except (AttributeError, ValueError):
            return None
        return shutil.get_terminal_size().columns

    def history(self, entries: int) -> list[tuple[int, str]]:
        """The last ``entries`` lines (this ``history`` command included, as JLine records a line
        before running it), numbered from 0."""
        entries = max(entries, 0)
        start = max(len(self._history) - entries, 0)
        return [(i, self._history[i]) for i in range(start, len(self._history))]

    # -- line editing -------------------------------------------------------------------------

    def _setup_readline(self) -> Any:
        try:
            import readline
        except ImportError:  # a Python built without it: plain lines
            return None
        readline.set_completer_delims(" \t\n")
        readline.set_completer(self._complete)
        if "libedit" in (readline.__doc__ or ""):
            readline.parse_and_bind("bind ^I rl_complete")
        else:
            readline.parse_and_bind("tab: complete")
        readline.clear_history()
        return readline

    def _complete(self, text: str, index: int) -> str | None:
        """readline's completer: called with index 0, 1, ... until it returns None."""
        if index == 0:
            rl = self._readline
            try:
                before = rl.get_line_buffer()[:rl.get_begidx()] if rl is not None else ""
                words = split_line(before) + [text]
                self._candidates = [c.value + (" " if c.complete else "")
                                    for c in complete_line(self.state, words)]
            except Exception:  # noqa: BLE001 - a completer must never break the prompt
                self._candidates = []
        return self._candidates[index] if index < len(self._candidates) else None

    def _read_line(self, prompt: str) -> str:
        if self.stdin is sys.stdin and self.stdout is sys.stdout:
            return input(prompt)
        self.stdout.write(prompt)
        self.stdout.flush()
        line = self.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    # -- the loop -----------------------------------------------------------------------------

    def run_main_loop(self) -> int:
        """Read, run, repeat, until ``exit`` or end of input; 0 (a failed command does not end it)."""
        if self.stdin is sys.stdin and sys.stdin.isatty() and threading.current_thread() is threading.main_thread():
            # Ctrl-C abandons the line however the shell was started: a process started with SIGINT
            # ignored (a non-interactive shell's background job) or blocked (the mask a parent's
            # thread had) keeps it so across exec, and Ctrl-C then did nothing at all
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        self.stdout.write("[ Kafka Metadata Shell ]\n")
        self.stdout.flush()
        commands = Commands(True)
        while True:
            try:
                line = self._read_line(">> ")
            except KeyboardInterrupt:
                self.stdout.write("^C\n")
                continue
            except EOFError:
                self.stdout.write("\n")
                return 0
            if line.strip() and (not self._history or self._history[-1] != line):
                self._history.append(line)
            try:
                handler = commands.parse_command(split_line(line))
            except ValueError as exc:
                handler = ErroneousCommand(f"cannot parse the line: {exc}")
            io = CommandIO(self.stdout, self.stderr)
            try:
                handler.run(self, io, self.state)
            except ShellExit:
                return 0
            except KeyboardInterrupt:
                self.stdout.write("^C\n")
            except Exception as exc:  # noqa: BLE001 - one bad command must not end the session
                io.error(f"{type(exc).__name__}: {exc}")
            self.stdout.flush()
            self.stderr.flush()
