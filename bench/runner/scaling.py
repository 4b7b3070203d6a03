"""The scaling benchmarks: how Tessera's figures move with queue depth, with the number of
members, and with the cores its daemon may use and the connections a host opens.
`cargo xtask bench scaling` (or `python3 bench/run.py scaling`); the method and recorded figures
are in docs/benchmarks.md.

Three studies, each measured with fio over NBD on member files in tmpfs (so the software path
is what scales, not this machine's disk), three interleaved runs a point:
- queue depth: RAID5 4+1 and `nbdkit memory` (the transport ceiling), 4 KiB random reads and
  writes at each depth;
- members: RAID0 and RAID5 over 3 to 8 members, 4 KiB random reads and writes and 128 KiB
  sequential writes at QD32;
- cores and connections: the RAID5 4+1 group on a daemon free to use both cores and on a second
  daemon confined to one (`taskset`, inherited by every thread it starts), each driven by one
  and by two fio jobs (each its own NBD connection, at QD32)."""

import argparse
import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .main import clean_workdir, size_bytes
from .measure import RunSettings, precondition, run_point
from .members import MemberPool
from .nbdkit import MemoryTarget
from .shell import Shell, say
from .stats import Figure, fold
from .study import begin
from .tessera import TesseraDaemon, TesseraTarget
from .workloads import CORNERS, Point

REPO = Path(__file__).resolve().parents[2]
CORNER = {corner.key: corner for corner in CORNERS}
DEPTH_CORNERS = ("randread-4k", "randwrite-4k")
MEMBER_CORNERS = ("randread-4k", "randwrite-4k", "seqwrite-128k")
CORE_CORNERS = ("randread-4k", "randwrite-4k", "seqread-128k", "seqwrite-128k")
CLIENT_JOBS = (1, 2)
# The core the confined daemon runs on: fio and the other daemon may use both.
CONFINED_CPU = 1


def int_list(text: str) -> list[int]:
    return [int(value) for value in text.split(",") if value.strip()]


def parse_options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cargo xtask bench scaling",
        description="How Tessera's figures scale with queue depth, member count, daemon cores "
        "and client connections (fio over NBD, member files on tmpfs).",
    )
    parser.add_argument("--depths", default="1,2,4,8,16,32,64,128",
                        help="queue depths of the depth study (default 1,2,4,8,16,32,64,128)")
    parser.add_argument("--member-counts", default="3,4,5,6,8",
                        help="member counts of the member study (default 3,4,5,6,8)")
    parser.add_argument("--studies", default="depth,members,cores",
                        help="which studies to run (default depth,members,cores)")
    parser.add_argument("--runs", type=int, default=3, help="runs per point (default 3)")
    parser.add_argument("--runtime", type=float, default=3.0, help="measured seconds per run")
    parser.add_argument("--ramp", type=float, default=1.0, help="warm-up seconds before each run")
    parser.add_argument("--member-size", default="512M", help="size of each member file (sparse)")
    parser.add_argument("--vd-size", default="512M", help="size of each virtual drive")
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm/tessera-bench-scaling"))
    parser.add_argument("--tessera", type=Path, default=REPO / "target/release/tessera")
    parser.add_argument("--out", type=Path, help="result directory (default bench/results/<stamp>-scaling)")
    parser.add_argument("--nice", type=int, default=-10, help="scheduling priority (default -10)")
    options = parser.parse_args(argv)
    options.depths = int_list(options.depths)
    options.member_counts = int_list(options.member_counts)
    options.studies = [name.strip() for name in options.studies.split(",") if name.strip()]
    for study in options.studies:
        if study not in ("depth", "members", "cores"):
            parser.error(f"unknown study {study!r}; known: depth, members, cores")
    if "cores" in options.studies and (os.cpu_count() or 1) <= CONFINED_CPU:
        parser.error(f"the cores study confines a daemon to CPU {CONFINED_CPU}: it needs 2 CPUs")
    if any(count < 2 for count in options.member_counts):
        parser.error("member counts start at 2 (RAID5 needs 3; smaller counts run RAID0 only)")
    return options


@dataclass
class Measurement:
    """One point of a study: a target at a point, under a label naming the study's variable
    (it becomes the row's `state`, so the runs of one label fold together)."""

    target: object
    label: str
    point: Point
    settings: RunSettings


class ScalingBench:
    def __init__(self, options: argparse.Namespace, out_dir: Path):
        self.options = options
        self.out_dir = out_dir
        self.shell = Shell(out_dir / "commands.log")
        workdir = options.workdir
        self.daemon = TesseraDaemon(self.shell, options.tessera, workdir / "tessera")
        self.confined = TesseraDaemon(
            self.shell, options.tessera, workdir / "tessera-one-core",
            command_prefix=["taskset", "-c", str(CONFINED_CPU)],
        )
        self.pool = MemberPool(self.shell, workdir, size_bytes(options.member_size))
        self.vd_size_bytes = size_bytes(options.vd_size)
        self.rows: list[dict] = []
        self.targets: list = []

    def settings(self, client_jobs: int = 1) -> RunSettings:
        return RunSettings(self.options.ramp, self.options.runtime, 0, client_jobs)

    def target(self, target) -> object:
        say(f"scaling: setting up {target.label}")
        target.setup(self.pool, self.vd_size_bytes)
        precondition(self.shell, target, self.out_dir)
        self.targets.append(target)
        return target

    def raid(self, name: str, level: str, members: int, daemon: TesseraDaemon | None = None):
        label = f"RAID{level} {members - 1}+1" if level == "5" else f"RAID{level} x{members}"
        return self.target(TesseraTarget(name, label, level, members, daemon or self.daemon))

    def plan(self) -> list[Measurement]:
        """Every measurement of the chosen studies, in the order of one repetition."""
        options = self.options
        plan = []
        raid5 = None
        if "depth" in options.studies or "cores" in options.studies:
            raid5 = self.raid("raid5", "5", 5)
        if "depth" in options.studies:
            memory = self.target(MemoryTarget("memory", "nbdkit memory", self.shell, options.workdir))
            for depth in options.depths:
                for key in DEPTH_CORNERS:
                    for target in (raid5, memory):
                        plan.append(Measurement(target, f"qd{depth}", Point(CORNER[key], depth), self.settings()))
        if "members" in options.studies:
            for count in options.member_counts:
                levels = ["0"] + (["5"] if count >= 3 else [])
                for level in levels:
                    target = self.raid(f"raid{level}-m{count}", level, count)
                    for key in MEMBER_CORNERS:
                        plan.append(Measurement(target, f"members{count}", Point(CORNER[key], 32), self.settings()))
        if "cores" in options.studies:
            self.confined.start()
            one_core = self.raid("raid5-one-core", "5", 5, self.confined)
            for jobs in CLIENT_JOBS:
                for key in CORE_CORNERS:
                    for target in (raid5, one_core):
                        plan.append(Measurement(target, f"jobs{jobs}", Point(CORNER[key], 32), self.settings(jobs)))
        return plan

    def run(self) -> None:
        self.daemon.start()
        plan = self.plan()
        total = len(plan) * self.options.runs
        say(f"scaling: {total} runs of {self.options.ramp:g}+{self.options.runtime:g} s")
        done = 0
        for rep in range(1, self.options.runs + 1):
            # Each repetition walks the plan from a different start, so slow drifts of a shared
            # machine do not always fall on the same points.
            shift = (rep - 1) * len(plan) // self.options.runs
            for measurement in plan[shift:] + plan[:shift]:
                row = run_point(self.shell, self.out_dir, measurement.settings, measurement.target,
                                measurement.label, measurement.point, rep)
                row["client_jobs"] = measurement.settings.client_jobs
                self.rows.append(row)
                done += 1
                say(f"[{done}/{total}] {row['target']} {row['state']} {row['point']}: "
                    f"{row['iops']:,.0f} IOPS {row['mb_per_second']:,.0f} MB/s")
            self.save()

    def save(self) -> None:
        (self.out_dir / "results.json").write_text(json.dumps(self.rows, indent=1))

    def stop(self) -> None:
        for daemon in (self.confined, self.daemon):
            daemon.stop()


def cell(figure: Figure | None, metric: str = "iops") -> str:
    """A mean; a throughput gets `*` when the runs' IOPS vary by more than 10%."""
    if figure is None or figure.get(metric) is None:
        return "-"
    text = f"{figure.get(metric):,.0f}"
    throughput = metric in ("iops", "mb_per_second")
    return text + ("*" if throughput and figure.noisy else "")


def cpu_us_per_io(figure: Figure | None) -> str:
    """Daemon CPU time per I/O: 10^4 over IOPS per CPU-percent."""
    value = figure.get("iops_per_server_cpu_percent") if figure else None
    return f"{1e4 / value:.1f}" if value else "-"


def ratio_cell(figure: Figure | None, reference: Figure | None, metric: str = "iops") -> str:
    if figure is None or reference is None:
        return "-"
    value, base = figure.get(metric), reference.get(metric)
    return f"{value / base:.2f}" if value and base else "-"


def depth_table(figures: dict, depths: list[int]) -> list[str]:
    lines = [
        "| QD | 4K random read IOPS | p50 us | p99 us | daemon CPU us/IO | nbdkit memory | ratio "
        "| 4K random write IOPS | p50 us | p99 us | daemon CPU us/IO | nbdkit memory | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for depth in depths:
        cells = [str(depth)]
        for key in DEPTH_CORNERS:
            point = f"{key}-qd{depth}"
            ours = figures.get(("raid5", f"qd{depth}", point))
            memory = figures.get(("memory", f"qd{depth}", point))
            cells += [cell(ours), cell(ours, "p50_us"), cell(ours, "p99_us"), cpu_us_per_io(ours),
                      cell(memory), ratio_cell(ours, memory)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def members_table(figures: dict, counts: list[int]) -> list[str]:
    lines = [
        "| members | RAID0 4K rand read | RAID5 4K rand read | RAID0 4K rand write "
        "| RAID5 4K rand write | RAID0 128K seq write MB/s | RAID5 128K seq write MB/s "
        "| RAID5 CPU us per 4K write |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for count in counts:
        def figure(level: str, key: str) -> Figure | None:
            return figures.get((f"raid{level}-m{count}", f"members{count}", f"{key}-qd32"))
        lines.append(
            f"| {count} | {cell(figure('0', 'randread-4k'))} | {cell(figure('5', 'randread-4k'))} "
            f"| {cell(figure('0', 'randwrite-4k'))} | {cell(figure('5', 'randwrite-4k'))} "
            f"| {cell(figure('0', 'seqwrite-128k'), 'mb_per_second')} "
            f"| {cell(figure('5', 'seqwrite-128k'), 'mb_per_second')} "
            f"| {cpu_us_per_io(figure('5', 'randwrite-4k'))} |"
        )
    return lines


def cores_table(figures: dict) -> list[str]:
    lines = [
        "| workload (QD32 per job) | fio jobs | both cores | daemon CPU % | one core | daemon CPU % "
        "| one core / both |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key in CORE_CORNERS:
        metric = "mb_per_second" if key.endswith("128k") else "iops"
        unit = " MB/s" if metric == "mb_per_second" else " IOPS"
        for jobs in CLIENT_JOBS:
            point = f"{key}-qd32"
            both = figures.get(("raid5", f"jobs{jobs}", point))
            one = figures.get(("raid5-one-core", f"jobs{jobs}", point))
            lines.append(
                f"| {CORNER[key].label}{unit} | {jobs} | {cell(both, metric)} | {cpu_percent(both)} "
                f"| {cell(one, metric)} | {cpu_percent(one)} | {ratio_cell(one, both, metric)} |"
            )
    return lines


def cpu_percent(figure: Figure | None) -> str:
    if figure is None or not figure.get("wall_seconds"):
        return "-"
    return f"{100 * figure.get('server_cpu_seconds') / figure.get('wall_seconds'):.0f}"


def report(rows: list[dict], depths: list[int], counts: list[int]) -> str:
    figures = fold(rows)
    states = {row["state"] for row in rows}
    sections = []
    if any(state.startswith("qd") for state in states):
        sections.append(["## Queue depth (RAID5 4+1)", "", *depth_table(figures, depths)])
    if any(state.startswith("members") for state in states):
        sections.append(["## Members (QD32)", "", *members_table(figures, counts)])
    if any(state.startswith("jobs") for state in states):
        sections.append(["## Daemon cores and client connections (RAID5 4+1)", "", *cores_table(figures)])
    text = "\n\n".join("\n".join(section) for section in sections)
    return text + "\n\nMeans of the runs; `*`: the runs' IOPS vary by more than 10% (CV).\n"


def machine_lines(meta: dict) -> str:
    described = meta["machine"]
    return "\n".join([
        f"- Started {meta['started_utc']}, finished {meta.get('finished_utc', '?')}; "
        f"priority {meta['priority']}; work tree at {described.get('git_revision', '?')}",
        *[f"- {line}" for line in described.get("lscpu", [])],
        f"- Kernel {described.get('kernel', '?')}; {described.get('memory', '?')}; "
        f"load average at start {described.get('load_average_at_start', '?')}",
        f"- {described.get('fio', '?')}; {described.get('nbdkit', '?')}",
    ])


def main(argv: list[str]) -> int:
    options = parse_options(argv)
    study = begin("scaling", argv, options.out, options.nice)
    out_dir = study.out_dir
    bench = ScalingBench(options, out_dir)
    bench.shell.note(study.command)
    meta = study.meta()
    clean_workdir(bench.shell, options.workdir)
    options.workdir.mkdir(parents=True)
    status = 0
    try:
        bench.run()
    except KeyboardInterrupt:
        say("scaling: interrupted; writing the report of what was measured")
        status = 130
    finally:
        for target in reversed(bench.targets):
            target.teardown()
        bench.stop()
        clean_workdir(bench.shell, options.workdir)
        study.finish()
        meta["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        (out_dir / "meta.json").write_text(json.dumps(meta, indent=1))
        bench.save()
    text = report(bench.rows, options.depths, options.member_counts)
    (out_dir / "report.md").write_text(
        f"# Scaling benchmark\n\n`{study.command}`\n\n{machine_lines(meta)}\n\n{text}"
    )
    print(text)
    say(f"scaling: report {out_dir / 'report.md'}")
    return status
