"""Running external commands, each one recorded in commands.log so a report can show exactly
what produced its figures."""

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path


class CommandFailed(Exception):
    """A command exited with a non-zero status."""


class Shell:
    """Runs commands and appends each to a log, with the time it started."""

    def __init__(self, log_path: Path):
        self.log_path = log_path
        self.started = time.monotonic()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "a", encoding="utf-8")

    def note(self, text: str) -> None:
        """A comment line in the command log (what the next commands are for)."""
        self.log.write(f"# {text}\n")
        self.log.flush()

    def record(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        elapsed_seconds = time.monotonic() - self.started
        prefix = "".join(f"{key}={shlex.quote(value)} " for key, value in (env or {}).items())
        self.log.write(f"[{elapsed_seconds:8.1f}s] {prefix}{shlex.join(argv)}\n")
        self.log.flush()

    def run(
        self,
        argv: list[str],
        check: bool = True,
        env: dict[str, str] | None = None,
        quiet_log: bool = False,
    ) -> str:
        """Runs a command to completion and returns its standard output."""
        if not quiet_log:
            self.record(argv, env)
        full_env = dict(os.environ, **env) if env else None
        result = subprocess.run(argv, capture_output=True, text=True, env=full_env)
        if check and result.returncode != 0:
            raise CommandFailed(
                f"{shlex.join(argv)} exited with {result.returncode}: "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return result.stdout

    def start(self, argv: list[str], log_file: Path) -> subprocess.Popen:
        """Starts a long-running process (a server) with its output in log_file."""
        self.record(argv)
        output = open(log_file, "ab")
        return subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)

    def start_capture(self, argv: list[str], stderr_file: Path) -> subprocess.Popen:
        """Starts a process whose standard output the caller collects (`communicate`); its
        errors go to stderr_file."""
        self.record(argv)
        errors = open(stderr_file, "ab")
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, text=True)


def wait_for(predicate, timeout_seconds: float, what: str, interval_seconds: float = 0.05):
    """Polls predicate until it returns a true value; raises TimeoutError after the timeout."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_seconds:.0f} s waiting for {what}")
        time.sleep(interval_seconds)


def say(text: str) -> None:
    """Progress for the person running the benchmark."""
    print(text, file=sys.stderr, flush=True)
