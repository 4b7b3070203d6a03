"""fio job files (rendered from the templates in bench/fio/) and fio's JSON output."""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "fio"
PERCENTILE_KEYS = {"p50": "50.000000", "p99": "99.000000", "p99_9": "99.900000"}


@dataclass(frozen=True)
class Connection:
    """How one fio job reaches the device under test: an NBD URI or a file, and its size."""

    engine_lines: tuple[str, ...]
    size_bytes: int

    @staticmethod
    def nbd(uri: str, size_bytes: int) -> "Connection":
        return Connection(("ioengine=nbd", f"uri={uri}"), size_bytes)

    @staticmethod
    def file(path: str, size_bytes: int) -> "Connection":
        # io_uring with O_DIRECT: what a user of a file system on NVMe would run.
        return Connection(("ioengine=io_uring", "direct=1", f"filename={path}"), size_bytes)


@dataclass(frozen=True)
class Stream:
    """One kind of I/O issued on every connection. `rate_iops_total` 0 means unlimited; a
    limit is shared evenly among the connections."""

    rw: str
    block_bytes: int
    iodepth: int
    rwmixread: int = 50
    rate_iops_total: int = 0


# How often a job's IOPS log gets a line (each the average of its interval).
IOPS_LOG_INTERVAL_MS = 100


def render_job_file(
    connections: list[Connection],
    streams: list[Stream],
    ramp_seconds: float,
    runtime_seconds: float,
    iops_log_prefix: str | None = None,
) -> str:
    """A job file: one job per (stream, connection); stream 0 is reporting group 0 (the
    measured load), each further stream its own group. With `iops_log_prefix`, every job logs
    its IOPS with wall-clock times (`<prefix>_iops.<job number>.log`), so that a run can be
    checked for jobs that did not run at the same time (`start_spread_seconds`)."""
    assert connections and streams
    text = (TEMPLATE_DIR / "global.fio").read_text().format(
        ramp_seconds=seconds_option(ramp_seconds), runtime_seconds=seconds_option(runtime_seconds)
    )
    if iops_log_prefix is not None:
        text += (
            f"write_iops_log={iops_log_prefix}\nlog_avg_msec={IOPS_LOG_INTERVAL_MS}\n"
            "log_unix_epoch=1\n"
        )
    job_template = (TEMPLATE_DIR / "job.fio").read_text()
    for stream_index, stream in enumerate(streams):
        for connection_index, connection in enumerate(connections):
            extra_lines = []
            if stream_index > 0 and connection_index == 0:
                extra_lines.append("new_group")
            if stream.rate_iops_total > 0:
                per_job = max(1, math.ceil(stream.rate_iops_total / len(connections)))
                extra_lines.append(f"rate_iops={per_job}")
            text += "\n" + job_template.format(
                job_name=f"s{stream_index}c{connection_index}",
                engine_lines="\n".join(connection.engine_lines),
                size_bytes=connection.size_bytes,
                rw=stream.rw,
                rwmixread=stream.rwmixread,
                block_bytes=stream.block_bytes,
                iodepth=stream.iodepth,
                extra_lines="\n".join(extra_lines),
            )
    return text


def render_precondition_file(connections: list[Connection]) -> str:
    """One sequential pass of writes over every connection's whole size, all at once."""
    text = (TEMPLATE_DIR / "precondition.fio").read_text()
    for index, connection in enumerate(connections):
        text += f"\n[fill{index}]\n" + "\n".join(connection.engine_lines)
        text += f"\nsize={connection.size_bytes}\n"
    return text


def seconds_option(seconds: float) -> str:
    """fio takes plain integers as seconds; fractions go in milliseconds."""
    milliseconds = round(seconds * 1000)
    assert milliseconds > 0
    return f"{milliseconds // 1000}" if milliseconds % 1000 == 0 else f"{milliseconds}ms"


@dataclass
class Direction:
    """One direction (read or write) of one reporting group."""

    iops: float = 0.0
    bw_bytes_per_second: float = 0.0
    completions: int = 0
    clat_us: dict[str, float] = field(default_factory=dict)


@dataclass
class Group:
    """One reporting group of a run, summed over its jobs."""

    read: Direction
    write: Direction
    cpu_seconds: float
    runtime_seconds: float


def parse_output(text: str) -> list[Group]:
    """fio's --output-format=json, as groups in group-id order. Text before the JSON object (the
    nbd engine may print a line when it connects) is skipped."""
    document = json.loads(text[text.index("{") :])
    groups: dict[int, Group] = {}
    for job in document["jobs"]:
        runtime_ms = float(job["job_runtime"])
        # usr_cpu and sys_cpu are percentages of job_runtime, which group_reporting sums over
        # the group's jobs: their product is the group's CPU time.
        cpu_seconds = (float(job["usr_cpu"]) + float(job["sys_cpu"])) / 100 * runtime_ms / 1000
        group = Group(
            read=parse_direction(job["read"]),
            write=parse_direction(job["write"]),
            cpu_seconds=cpu_seconds,
            runtime_seconds=runtime_ms / 1000,
        )
        group_id = int(job.get("groupid", 0))
        assert group_id not in groups, "group_reporting gives one entry per group"
        groups[group_id] = group
    return [groups[group_id] for group_id in sorted(groups)]


def parse_direction(section: dict) -> Direction:
    clat = section.get("clat_ns", {})
    percentiles = clat.get("percentile", {})
    clat_us = {
        name: percentiles[key] / 1000 for name, key in PERCENTILE_KEYS.items() if key in percentiles
    }
    return Direction(
        iops=float(section["iops"]),
        bw_bytes_per_second=float(section["bw_bytes"]),
        completions=int(section.get("total_ios", clat.get("N", 0))),
        clat_us=clat_us,
    )


def first_logged_ms(log_text: str) -> int | None:
    """The wall-clock time (ms) of the first line of one job's IOPS log, None if it is empty."""
    for line in log_text.splitlines():
        if line.strip():
            return int(line.split(",", 1)[0])
    return None


def start_spread_seconds(firsts: list[int | None]) -> float:
    """How far apart the jobs of a run began measuring. fio sums its jobs' rates as if they ran
    together; a job whose measured window began late (seen on this project's machine: one of
    five nbd jobs three seconds behind the rest, so that it ran alone after they ended) makes
    that sum up to twice what the servers did. A job that logged nothing counts as never
    started (infinity)."""
    if not firsts or any(first is None for first in firsts):
        return math.inf
    return (max(firsts) - min(firsts)) / 1000
