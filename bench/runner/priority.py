"""Scheduling priority of the run. The machine is shared (simulator seeds, fuzzers, builds), and
with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`) a process's nice value
only counts within its session's group: every busy session gets an equal share of the cores.
So the run lowers its own nice value and its session's autogroup nice value, and restores the
latter at the end."""

import os
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")


def autogroup_nice() -> int | None:
    """The nice value of this session's autogroup (None without autogroup scheduling)."""
    try:
        return int(AUTOGROUP.read_text().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return None


def raise_priority(nice: int) -> tuple[int | None, str]:
    """Applies `nice` to this process (inherited by everything it starts) and to its autogroup.
    Returns the autogroup's previous nice value and a sentence for the report."""
    os.nice(nice)
    previous = autogroup_nice()
    if previous is None:
        return None, f"nice {nice}"
    try:
        AUTOGROUP.write_text(str(nice))
    except OSError as error:
        return None, f"nice {nice} (autogroup unchanged: {error})"
    return previous, f"nice {nice}, and the session's autogroup nice {nice}"


def restore_autogroup(previous: int | None) -> None:
    if previous is not None:
        try:
            AUTOGROUP.write_text(str(previous))
        except OSError:
            pass
