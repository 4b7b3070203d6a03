"""The benchmark run: options, the plan (which runs, in which order), and its execution.

Runs are interleaved: for each repetition, each point is run on every live target in turn (the
order rotating between repetitions), so the slow drifts of a shared 2-core machine spread over
all targets instead of biasing whichever ran last."""

import argparse
import datetime
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import catalog, machine, priority
from .measure import RunSettings, precondition, run_point
from .members import MemberPool
from .report import write_outputs
from .shell import Shell, say
from .tessera import TesseraDaemon
from .workloads import CORNERS, Point, corner_points, sweep_points

REPO = Path(__file__).resolve().parents[2]
PEAK_POINT = f"{CORNERS[0].key}-qd32"
REQUIRED_TOOLS = ("fio", "nbdkit", "mkfs.btrfs", "losetup", "mount", "umount", "truncate")


def size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def name_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def parse_options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cargo xtask bench",
        description="fio over NBD against Tessera virtual drives, side by side with the "
        "baseline (nbdkit file per member), the transport ceiling (nbdkit memory) and btrfs "
        "RAID5/RAID1 on the same kind of members. Writes bench/results/<timestamp>/report.md. "
        "Needs root (loop devices, mount).",
    )
    parser.add_argument("--quick", action="store_true",
                        help="one run per point, 1 s runs, three sweep steps: for trying things")
    parser.add_argument("--runs", type=int, help="runs per point (default 3; --quick: 1)")
    parser.add_argument("--runtime", type=float,
                        help="measured seconds per run (default 3; --quick: 1)")
    parser.add_argument("--ramp", type=float,
                        help="seconds of warm-up before each run (default 1; --quick: 0.5)")
    parser.add_argument("--targets", default=",".join(catalog.ALL_NAMES),
                        help="configurations to measure (default: all): " + ", ".join(catalog.ALL_NAMES))
    parser.add_argument("--states", default=",".join(catalog.LIFECYCLE_STATES),
                        help="lifecycle states of the RAID5/RAID6 groups (default: all)")
    parser.add_argument("--corners", default=",".join(corner.key for corner in CORNERS),
                        help="corners to measure (default: all): "
                        + ", ".join(corner.key for corner in CORNERS))
    parser.add_argument("--sweep-targets", default="raid5,baseline,btrfs-raid5,memory",
                        help="targets of the latency-vs-IOPS sweep ('' for none)")
    parser.add_argument("--sweep-fractions",
                        help="rate-limited steps as fractions of each target's peak "
                        "(default 0.25,0.5,0.75,0.9; --quick: 0.25,0.5,0.9); an unlimited step follows")
    parser.add_argument("--write-stream-iops", type=int, default=2000,
                        help="rate of the 4 KiB random-write stream beside the sweep's reads")
    parser.add_argument("--client-jobs", type=int, default=1,
                        help="fio jobs (each its own NBD connection, at the point's queue depth) "
                        "per virtual drive, nbdkit memory disk or btrfs file; the baseline always "
                        "runs one job per member (default 1)")
    parser.add_argument("--member-size", default="512M", help="size of each member file")
    parser.add_argument("--vd-size", default="512M",
                        help="size of each virtual drive, nbdkit memory disk and btrfs test file")
    parser.add_argument("--devices",
                        help="comma-separated block devices to use as members instead of tmpfs "
                        "files (DESTROYS their contents; targets then run one after another)")
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm/tessera-bench"),
                        help="where member files, sockets and mounts live (tmpfs)")
    parser.add_argument("--tessera", type=Path, default=REPO / "target/release/tessera",
                        help="the tessera binary")
    parser.add_argument("--out", type=Path, help="result directory (default bench/results/<timestamp>)")
    parser.add_argument("--nice", type=int, default=-10,
                        help="scheduling priority of the run, so other work on the machine "
                        "disturbs it less (default -10)")
    parser.add_argument("--report-only", type=Path, metavar="DIR",
                        help="only rewrite DIR's report and plots from its results.json")
    options = parser.parse_args(argv)
    options.runs = options.runs or (1 if options.quick else 3)
    options.runtime = options.runtime or (1.0 if options.quick else 3.0)
    options.ramp = options.ramp or (0.5 if options.quick else 1.0)
    fractions = options.sweep_fractions or ("0.25,0.5,0.9" if options.quick else "0.25,0.5,0.75,0.9")
    options.sweep_fractions = [float(value) for value in name_list(fractions)]
    options.targets = name_list(options.targets)
    options.states = name_list(options.states)
    options.corners = name_list(options.corners)
    known_corners = [corner.key for corner in CORNERS]
    for corner in options.corners:
        if corner not in known_corners:
            parser.error(f"unknown corner {corner!r}; known: {', '.join(known_corners)}")
    options.sweep_targets = name_list(options.sweep_targets)
    for name in options.targets + options.sweep_targets:
        if name not in catalog.SPEC_BY_NAME:
            parser.error(f"unknown target {name!r}; known: {', '.join(catalog.ALL_NAMES)}")
    for state in options.states:
        if state not in catalog.LIFECYCLE_STATES:
            parser.error(f"unknown state {state!r}; known: {', '.join(catalog.LIFECYCLE_STATES)}")
    options.devices = name_list(options.devices) if options.devices else None
    return options


@dataclass
class Run:
    target: object
    state: str
    point: Point
    rep: int


@dataclass
class Action:
    description: str
    do: object


class Bench:
    def __init__(self, options: argparse.Namespace, out_dir: Path, shell: Shell):
        self.options = options
        self.out_dir = out_dir
        self.shell = shell
        self.rows: list[dict] = []
        self.notes: list[str] = []
        self.settings = RunSettings(
            options.ramp, options.runtime, options.write_stream_iops, options.client_jobs
        )
        self.runs_done = 0
        self.runs_total = 0
        self.started: float | None = None

    def peak_iops(self, target_name: str) -> float:
        values = [
            row["iops"]
            for row in self.rows
            if row["target"] == target_name and row["state"] == "optimal" and row["point"] == PEAK_POINT
        ]
        return sum(values) / len(values) if values else 0.0

    def interleaved(self, targets: list, state: str, points: list[Point], after_run=None) -> list:
        """Every (point, target) pair once per repetition, rotating the target order."""
        steps = []
        for rep in range(1, self.options.runs + 1):
            for point in points:
                shift = (rep - 1) % len(targets)
                for target in targets[shift:] + targets[:shift]:
                    spec = catalog.SPEC_BY_NAME[target.name]
                    if not point.is_sweep and point.iodepth not in spec.queue_depths:
                        continue
                    steps.append(Run(target, state, point, rep))
                    if after_run is not None:
                        steps.append(Action(f"{target.name}: after the run", lambda t=target: after_run(t)))
        return steps

    def plan(self, targets: list) -> list:
        options = self.options
        steps = []
        corners = corner_points(keys=options.corners)
        if "optimal" in options.states:
            steps += self.interleaved(targets, "optimal", corners)
            sweepers = [t for t in targets if t.name in options.sweep_targets]
            if sweepers:
                steps += self.interleaved(sweepers, "optimal", sweep_points(options.sweep_fractions))
        lifecycle = [t for t in targets if catalog.SPEC_BY_NAME[t.name].lifecycle]
        if lifecycle and "degraded" in options.states:
            for target in lifecycle:
                steps.append(Action(f"{target.name}: pd fail", target.fail_member))
            steps += self.interleaved(lifecycle, "degraded", corners)
        if lifecycle and "rebuilding" in options.states:
            for target in lifecycle:
                steps.append(Action(f"{target.name}: degraded", lambda t=target: ensure_degraded(t)))
            # Between runs the group waits degraded, so one group's rebuild never runs beside
            # another target's measurement.
            steps += self.interleaved(lifecycle, "rebuilding", corners, after_run=ensure_degraded)
        for target in lifecycle:
            steps.append(Action(f"{target.name}: back to optimal", target.restore))
        return steps

    def execute(self, steps: list) -> None:
        for step in steps:
            if isinstance(step, Action):
                step.do()
                continue
            if self.started is None:
                self.started = time.monotonic()
            peak = self.peak_iops(step.target.name) if step.point.is_sweep else 0.0
            if step.point.is_sweep and peak == 0:
                self.note_once(f"sweep of {step.target.name} skipped: no optimal {PEAK_POINT} figure")
                self.runs_done += 1
                continue
            row = run_point(
                self.shell, self.out_dir, self.settings, step.target, step.state, step.point, step.rep, peak
            )
            self.rows.append(row)
            self.runs_done += 1
            self.save()
            self.progress(row)

    def note_once(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            say(text)

    def progress(self, row: dict) -> None:
        elapsed = time.monotonic() - self.started
        left = elapsed / self.runs_done * (self.runs_total - self.runs_done)
        latency = f"p99 {row['p99_us']:.0f} us" if row.get("p99_us") else ""
        say(
            f"[{self.runs_done}/{self.runs_total} ~{left / 60:.0f} min left] {row['target']} "
            f"{row['state']} {row['point']} run {row['run']}: {row['iops']:,.0f} IOPS "
            f"{row['mb_per_second']:,.0f} MB/s {latency}"
        )

    def save(self) -> None:
        (self.out_dir / "results.json").write_text(json.dumps(self.rows, indent=1))


def ensure_degraded(target) -> None:
    """Stops a rebuild (or leaves the optimal state) by failing the member."""
    if target.state() != "degraded":
        target.fail_member()


def check_prerequisites(options) -> list[str]:
    problems = []
    if os.geteuid() != 0:
        problems.append("run as root (loop devices, mkfs.btrfs, mount)")
    for tool in REQUIRED_TOOLS:
        if shutil.which(tool) is None:
            problems.append(f"{tool} is missing (./scripts/setup.sh installs fio and nbdkit; "
                            "btrfs-progs for mkfs.btrfs)")
    if not options.tessera.exists():
        problems.append(f"{options.tessera} does not exist (cargo build --release -p tessera-cli)")
    return problems


def clean_workdir(shell: Shell, workdir: Path) -> None:
    """Removes what an earlier, interrupted run may have left: mounts, loop devices, files."""
    if not workdir.exists():
        return
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mountpoint in sorted((m for m in mounts if m.startswith(str(workdir) + "/")), reverse=True):
        shell.run(["umount", mountpoint], check=False)
    for line in shell.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                          check=False).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].startswith(str(workdir) + "/"):
            shell.run(["losetup", "-d", parts[0]], check=False)
    shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    options = parse_options(argv)
    if options.report_only:
        write_outputs(options.report_only)
        return 0
    problems = check_prerequisites(options)
    if problems:
        for problem in problems:
            say(f"bench: {problem}")
        return 2
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out_dir = options.out or REPO / "bench" / "results" / stamp
    out_dir.mkdir(parents=True, exist_ok=True)
    shell = Shell(out_dir / "commands.log")
    command = ("cargo xtask bench " + shlex.join(argv)).strip()
    shell.note(command)
    previous_autogroup_nice, priority_note = None, "not changed"
    if options.nice:
        previous_autogroup_nice, priority_note = priority.raise_priority(options.nice)
    meta = {
        "command": command,
        "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": {
            "runs": options.runs,
            "runtime_seconds": options.runtime,
            "ramp_seconds": options.ramp,
            "member_size_bytes": size_bytes(options.member_size),
            "vd_size_bytes": size_bytes(options.vd_size),
            "devices": options.devices,
            "targets": options.targets,
            "states": options.states,
            "corners": options.corners,
            "sweep_targets": options.sweep_targets,
            "sweep_fractions": options.sweep_fractions,
            "write_stream_iops": options.write_stream_iops,
            "client_jobs": options.client_jobs,
            "nice": options.nice,
            "priority": priority_note,
            "quick": options.quick,
        },
        "machine": machine.describe(REPO),
    }
    say(f"bench: results in {out_dir}")
    clean_workdir(shell, options.workdir)
    options.workdir.mkdir(parents=True)
    daemon = TesseraDaemon(shell, options.tessera, options.workdir / "tessera")
    pool = MemberPool(shell, options.workdir, size_bytes(options.member_size), options.devices)
    bench = Bench(options, out_dir, shell)
    vd_size_bytes = size_bytes(options.vd_size)
    status = 0
    try:
        daemon.start()
        meta["tessera_info"] = daemon.info()
        meta["tessera_binary"] = str(options.tessera)
        meta["tessera_binary_given"] = "--tessera" in " ".join(argv)
        meta["tessera_version"] = shell.run([str(options.tessera), "--version"]).strip()
        names = [name for name in catalog.ALL_NAMES if name in options.targets]
        batches = [[name] for name in names] if pool.shared else [names]
        plans = []
        for batch in batches:
            targets = [catalog.build_target(name, shell, options.workdir, daemon) for name in batch]
            plans.append((targets, bench.plan(targets)))
        bench.runs_total = sum(isinstance(step, Run) for _, steps in plans for step in steps)
        say(f"bench: {bench.runs_total} runs of {options.ramp:g}+{options.runtime:g} s")
        for targets, steps in plans:
            try:
                for target in targets:
                    say(f"bench: setting up {target.label}")
                    target.setup(pool, vd_size_bytes)
                    precondition(shell, target, out_dir)
                bench.execute(steps)
            finally:
                for target in targets:
                    target.teardown()
    except KeyboardInterrupt:
        say("bench: interrupted; writing the report of what was measured")
        status = 130
    finally:
        meta["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        meta["notes"] = bench.notes
        # Enough lines that a panic's message comes with its whole backtrace.
        meta["daemon_log_tail"] = tail(options.workdir / "tessera" / "daemon.log", 80)
        daemon.stop()
        clean_workdir(shell, options.workdir)
        priority.restore_autogroup(previous_autogroup_nice)
        (out_dir / "meta.json").write_text(json.dumps(meta, indent=1))
        bench.save()
    write_outputs(out_dir)
    say(f"bench: report {out_dir / 'report.md'}")
    return status


def tail(path: Path, lines: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return []


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
