"""CPU time from /proc: per process (the Tessera daemon, nbdkit), for all kernel threads (the
loop devices and btrfs workers do their work there), and for the whole machine (to see how much
other work shared the two cores during a run)."""

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
# PF_KTHREAD in /proc/PID/stat's flags field (include/linux/sched.h).
KERNEL_THREAD_FLAG = 0x00200000


def stat_fields(stat_text: str) -> list[str]:
    """The fields of a /proc/PID/stat line after the command name, which may contain spaces and
    parentheses: element 0 is the state (field 3 in proc(5))."""
    return stat_text[stat_text.rindex(")") + 2 :].split()


def process_cpu_seconds_from_stat(stat_text: str) -> float:
    """utime + stime (fields 14 and 15 in proc(5)) of all the process's threads, in seconds."""
    fields = stat_fields(stat_text)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_SECOND


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by a running process (0 if it is gone)."""
    try:
        return process_cpu_seconds_from_stat(Path(f"/proc/{pid}/stat").read_text())
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def kernel_threads_cpu_seconds() -> dict[int, float]:
    """CPU seconds used so far by each kernel thread (kworkers, loop, btrfs workers), by pid."""
    seconds_by_pid = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        fields = stat_fields(text)
        if int(fields[6]) & KERNEL_THREAD_FLAG:
            seconds_by_pid[int(entry.name)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_SECOND
    return seconds_by_pid


def kernel_threads_delta_seconds(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU time the kernel threads used between two snapshots. Only threads alive at the second
    snapshot count: kworkers come and go, and summing totals would subtract the whole lifetime
    of a thread that exited (a thread that exited loses its last slice instead). A pid that
    reappears with less time than before is a new thread: its whole time counts."""
    total_seconds = 0.0
    for pid, seconds in after.items():
        earlier = before.get(pid, 0.0)
        total_seconds += seconds - earlier if seconds >= earlier else seconds
    return total_seconds


def machine_busy_seconds_from_stat(proc_stat_text: str) -> float:
    """Busy CPU seconds of all CPUs from /proc/stat's `cpu` line: everything but idle and
    iowait (guest time is already inside user time)."""
    line = proc_stat_text.splitlines()[0]
    assert line.startswith("cpu "), "the first line of /proc/stat sums all CPUs"
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(value) for value in line.split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS_PER_SECOND


def machine_busy_seconds() -> float:
    return machine_busy_seconds_from_stat(Path("/proc/stat").read_text())


@dataclass
class CpuSnapshot:
    """CPU counters at one moment."""

    server_seconds: float
    kernel_threads_seconds_by_pid: dict[int, float]
    machine_busy_seconds: float


def snapshot(server_pids: list[int]) -> CpuSnapshot:
    return CpuSnapshot(
        server_seconds=sum(process_cpu_seconds(pid) for pid in server_pids),
        kernel_threads_seconds_by_pid=kernel_threads_cpu_seconds(),
        machine_busy_seconds=machine_busy_seconds(),
    )
