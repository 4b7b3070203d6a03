"""One measured run: render the job file, take CPU counters, run fio, read its JSON, and turn
both into one row of results.json."""

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from . import cpu
from .fio import (
    first_logged_ms,
    parse_output,
    render_job_file,
    render_precondition_file,
    start_spread_seconds,
)
from .shell import Shell
from .workloads import Point


# A run whose fio jobs began measuring further apart than this share of the runtime is run
# again (at most ATTEMPTS_MAX times in all): fio's sum of their rates would overstate it.
START_SPREAD_SHARE_MAX = 0.2
ATTEMPTS_MAX = 3


@dataclass
class RunSettings:
    ramp_seconds: float
    runtime_seconds: float
    write_stream_iops: int
    # fio jobs per connection of a single-export target (the baseline has one per member).
    client_jobs: int = 1


def precondition(shell: Shell, target, out_dir: Path) -> None:
    """Writes every byte the measurements will touch once, sequentially."""
    job_path = out_dir / "jobs" / f"{target.name}-precondition.fio"
    job_path.parent.mkdir(parents=True, exist_ok=True)
    job_path.write_text(render_precondition_file(target.connections()))
    output_path = out_dir / "raw" / f"{target.name}-precondition.json"
    output_path.parent.mkdir(parents=True, exist_ok=True)
    shell.run(["fio", "--output-format=json", f"--output={output_path}", str(job_path)])


def run_point(
    shell: Shell,
    out_dir: Path,
    settings: RunSettings,
    target,
    state: str,
    point: Point,
    rep: int,
    peak_iops: float = 0.0,
) -> dict:
    streams = point.streams(peak_iops, settings.write_stream_iops)
    connections = target.connections()
    if target.kind != "baseline":
        connections = connections * settings.client_jobs
    run_name = f"{target.name}-{state}-{point.key}-run{rep}"
    output_path = out_dir / "raw" / f"{run_name}.json"
    output_path.parent.mkdir(parents=True, exist_ok=True)
    job_count = len(connections) * len(streams)
    log_prefix = str(output_path.with_suffix("")) if job_count > 1 else None
    job_path = out_dir / "jobs" / f"{target.name}-{state}-{point.key}.fio"
    job_path.parent.mkdir(parents=True, exist_ok=True)
    job_path.write_text(
        render_job_file(
            connections, streams, settings.ramp_seconds, settings.runtime_seconds, log_prefix
        )
    )

    server_pids = target.server_pids()
    log_paths = []
    if log_prefix is not None:
        log_paths = [Path(f"{log_prefix}_iops.{job}.log") for job in range(1, job_count + 1)]
    for attempt in range(1, ATTEMPTS_MAX + 1):
        for path in log_paths:
            path.unlink(missing_ok=True)
        keeper = target.rebuild_keeper() if state == "rebuilding" else nullcontext()
        before = cpu.snapshot(server_pids)
        started = time.monotonic()
        with keeper:
            shell.run(["fio", "--output-format=json", f"--output={output_path}", str(job_path)])
        wall_seconds = time.monotonic() - started
        after = cpu.snapshot(server_pids)
        spread = None
        if log_paths:
            spread = start_spread_seconds(
                [first_logged_ms(path.read_text()) if path.exists() else None for path in log_paths]
            )
        if spread is None or spread <= START_SPREAD_SHARE_MAX * settings.runtime_seconds:
            break
        shell.note(
            f"{run_name}: its {job_count} jobs began measuring {spread:.1f} s apart in a "
            f"{settings.runtime_seconds:g} s run"
            + ("; running it again" if attempt < ATTEMPTS_MAX else "")
        )

    groups = parse_output(output_path.read_text())
    measured = groups[0]
    direction = measured.read if point.corner.latency_direction == "read" else measured.write
    kernel_threads_seconds = cpu.kernel_threads_delta_seconds(
        before.kernel_threads_seconds_by_pid, after.kernel_threads_seconds_by_pid
    )
    # btrfs has no server process: its work runs in kernel threads (and in fio's system time).
    if target.kind == "btrfs":
        server_seconds = kernel_threads_seconds
    else:
        server_seconds = after.server_seconds - before.server_seconds
    fio_seconds = sum(group.cpu_seconds for group in groups)
    machine_seconds = after.machine_busy_seconds - before.machine_busy_seconds
    accounted_seconds = fio_seconds + kernel_threads_seconds
    if target.kind != "btrfs":
        accounted_seconds += server_seconds
    iops = measured.read.iops + measured.write.iops
    server_cpu_percent = 100 * server_seconds / wall_seconds
    row = {
        "target": target.name,
        "state": state,
        "point": point.key,
        "run": rep,
        "iops": iops,
        "mb_per_second": (measured.read.bw_bytes_per_second + measured.write.bw_bytes_per_second)
        / 1e6,
        "p50_us": direction.clat_us.get("p50"),
        "p99_us": direction.clat_us.get("p99"),
        "p99_9_us": direction.clat_us.get("p99_9"),
        "server_cpu_seconds": server_seconds,
        "fio_cpu_seconds": fio_seconds,
        "kernel_threads_cpu_seconds": kernel_threads_seconds,
        # Busy time of the machine not explained by this run: other work sharing the cores.
        "other_cpu_seconds": max(0.0, machine_seconds - accounted_seconds),
        "wall_seconds": wall_seconds,
        "iops_per_server_cpu_percent": iops / server_cpu_percent if server_cpu_percent > 0 else None,
        "rate_limit_iops": streams[0].rate_iops_total,
        "attempts": attempt,
        # None for a single fio job; else how far apart its jobs began measuring (-1: a job
        # logged nothing).
        "jobs_start_spread_seconds": spread if spread is None or math.isfinite(spread) else -1.0,
    }
    if len(groups) > 1:
        row["write_stream_iops"] = groups[1].write.iops
    if state == "rebuilding":
        record = keeper.record
        row["rebuild"] = {
            "rebuilding_fraction": record.rebuilding_fraction,
            "starts": record.starts,
            "finished": record.finished,
            "mean_rebuild_ms": record.mean_rebuild_ms,
        }
    return row
