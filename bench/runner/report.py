"""The markdown report (report.md) and the plots of one result directory, from its
results.json and meta.json alone, so `--report-only DIR` can redo them."""

import json
import statistics
from pathlib import Path

from . import catalog, goals
from .measure import ATTEMPTS_MAX, START_SPREAD_SHARE_MAX
from .shell import say
from .stats import CV_FLAG, Figure, fold, ratio
from .workloads import corner_points, sweep_points

FIGURE_COLUMNS = (
    ("IOPS", "iops", "{:,.0f}"),
    ("MB/s", "mb_per_second", "{:,.0f}"),
    ("p50 us", "p50_us", "{:,.1f}"),
    ("p99 us", "p99_us", "{:,.1f}"),
    ("p99.9 us", "p99_9_us", "{:,.1f}"),
    ("server CPU s", "server_cpu_seconds", "{:.2f}"),
    ("fio CPU s", "fio_cpu_seconds", "{:.2f}"),
    ("IOPS per server CPU-%", "iops_per_server_cpu_percent", "{:,.0f}"),
    ("other CPU s", "other_cpu_seconds", "{:.2f}"),
)
RATIO_COLUMNS = (
    ("IOPS", "iops"),
    ("MB/s", "mb_per_second"),
    ("p50", "p50_us"),
    ("p99", "p99_us"),
    ("p99.9", "p99_9_us"),
    ("IOPS per server CPU-%", "iops_per_server_cpu_percent"),
)


def fmt(template: str, value) -> str:
    return "-" if value is None else template.format(value)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


class Report:
    def __init__(self, rows: list[dict], meta: dict):
        self.rows = rows
        self.meta = meta
        self.figures = fold(rows)
        self.corner_points = corner_points()
        settings = meta.get("settings", {})
        self.sweep_points = sweep_points(settings.get("sweep_fractions", []))

    def figure(self, target: str, state: str, point: str) -> Figure | None:
        return self.figures.get((target, state, point))

    def has(self, target: str, state: str = "optimal") -> bool:
        return any(key[0] == target and key[1] == state for key in self.figures)

    def render(self) -> str:
        parts = [self.header(), self.goals_section(), self.notes_section(), self.machine_section()]
        for spec in catalog.SPECS:
            for state in catalog.LIFECYCLE_STATES:
                if self.has(spec.name, state):
                    parts.append(self.configuration_section(spec, state))
        parts.append(self.sweep_section())
        parts.append(self.plots_section())
        parts.append(self.commands_section())
        return "\n".join(part for part in parts if part)

    def header(self) -> str:
        meta, settings = self.meta, self.meta.get("settings", {})
        machine = meta.get("machine", {})
        modified = machine.get("crates_modified_files")
        dirty = "" if modified is None else (
            f", crates/ with {modified} uncommitted changed files" if modified else ", crates/ unchanged"
        )
        return (
            f"# Tessera end-to-end benchmark, {meta.get('started_utc', '?')}\n\n"
            f"- Command: `{meta.get('command', '?')}`\n"
            f"- Binary: `{meta.get('tessera_binary', '?')}` ({meta.get('tessera_version', '?')}); "
            f"{'given with --tessera; ' if meta.get('tessera_binary_given') else ''}"
            f"work tree at {machine.get('git_revision', '?')}{dirty} when the run started\n"
            f"- Each point: {settings.get('runs')} run(s) of {settings.get('ramp_seconds')} s ramp + "
            f"{settings.get('runtime_seconds')} s measured, interleaved across targets; figures are "
            f"means, CV is the coefficient of variation of IOPS (flagged `!` above "
            f"{CV_FLAG:.0%}).\n"
            f"- Client: {settings.get('client_jobs', 1)} fio job(s) (NBD connections) per "
            f"virtual drive, nbdkit memory disk and btrfs file; the baseline one job per member, "
            f"each at the point's queue depth, aggregated (so at QD1 the baseline has 5 I/Os in "
            f"flight).\n"
            f"- Members: {describe_members(settings)}; virtual drives, nbdkit memory and the btrfs "
            f"test file: {settings.get('vd_size_bytes', 0) >> 20} MiB, preconditioned by one "
            f"sequential write pass.\n"
            f"- Latency is fio's completion latency (clat) of reads (random read, mix, sequential "
            f"read) or writes (random and sequential write). Server CPU: the Tessera daemon, the "
            f"nbdkit processes, or for btrfs the kernel threads (loop, btrfs workers; btrfs work "
            f"done in fio's own system calls counts as fio CPU). Other CPU: busy time of the "
            f"machine not explained by the run: other processes sharing the two cores, which "
            f"mostly run while the run's processes wait (the run has priority: "
            f"{settings.get('priority', '?')}).\n"
        )

    def goals_section(self) -> str:
        rows = []
        for goal in goals.check(self.figures):
            result = {True: "pass", False: "**FAIL**", None: "not measured"}[goal.passed]
            rows.append([goal.requirement, goal.measured, result])
        return "## Targets (issue 7)\n\n" + table(["target", "measured", "result"], rows)

    def notes_section(self) -> str:
        notes = []
        noisy = [key for key, figure in self.figures.items() if figure.noisy]
        multi = [key for key, figure in self.figures.items() if figure.runs > 1]
        if multi:
            notes.append(f"{len(noisy)} of {len(multi)} points have an IOPS CV above {CV_FLAG:.0%}.")
        repeated = [row for row in self.rows if row.get("attempts", 1) > 1]
        if repeated:
            notes.append(
                f"{len(repeated)} runs were run again because their fio jobs began measuring "
                f"more than {START_SPREAD_SHARE_MAX:.0%} of the runtime apart (fio adds up the "
                "jobs' rates as if they ran together)."
            )
        runtime = self.meta.get("settings", {}).get("runtime_seconds")
        spread_out = [
            row
            for row in self.rows
            if runtime
            and row.get("jobs_start_spread_seconds") is not None
            and not 0 <= row["jobs_start_spread_seconds"] <= START_SPREAD_SHARE_MAX * runtime
        ]
        if spread_out:
            notes.append(
                f"{len(spread_out)} runs kept jobs that began measuring apart after "
                f"{ATTEMPTS_MAX} attempts: their IOPS overstate what the server did."
            )
        others = [row["other_cpu_seconds"] / row["wall_seconds"] for row in self.rows if row.get("wall_seconds")]
        if others:
            notes.append(
                f"Other processes on the machine used a median {statistics.median(others):.2f} "
                f"cores (maximum {max(others):.2f}, of 2) during the runs: the machine was shared."
            )
        rebuild_rows = [row["rebuild"] for row in self.rows if "rebuild" in row]
        if rebuild_rows:
            fraction = statistics.mean(r["rebuilding_fraction"] for r in rebuild_rows)
            starts = statistics.mean(r["starts"] for r in rebuild_rows)
            durations = [r["mean_rebuild_ms"] for r in rebuild_rows if r.get("mean_rebuild_ms")]
            duration = f"{statistics.mean(durations):,.0f} ms" if durations else "longer than a run"
            notes.append(
                f"Rebuilding state: a rebuild of one member ran during {fraction:.0%} of each run's "
                f"time on average ({starts:.1f} rebuild starts per run; a rebuild took "
                f"{duration} on average). Each run starts with the group degraded and brings the "
                f"member back online; a rebuild that finishes before the run ends is restarted "
                f"(the member is failed and brought back online), so some of the cost measured is "
                f"that churn. The groups' rebuild rate setting is 30% (the default)."
            )
        notes += self.meta.get("notes", [])
        if not notes:
            return ""
        return "## Notes\n\n" + "".join(f"- {note}\n" for note in notes)

    def machine_section(self) -> str:
        machine = self.meta.get("machine", {})
        lines = [
            f"- Kernel: {machine.get('uname', '?')}",
            f"- Memory: {machine.get('memory', '?')}",
            f"- Load average when the run started: {machine.get('load_average_at_start', '?')}",
            f"- Tools: {machine.get('fio', '?')}, {machine.get('nbdkit', '?')}, "
            f"{machine.get('btrfs_progs', '?')}",
            f"- Priority of the run: {self.meta.get('settings', {}).get('priority', '?')}",
        ]
        text = "## Machine\n\n" + "\n".join(lines) + "\n\n```\n" + "\n".join(machine.get("lscpu", [])) + "\n```\n"
        info = self.meta.get("tessera_info")
        if info:
            text += "\n`tessera info`:\n\n```\n" + info.strip() + "\n```\n"
        return text

    def references(self, spec, state: str) -> list[tuple[str, str, str]]:
        """(column label, target, state) that ratios are taken against."""
        references = []
        if spec.name != catalog.BASELINE and self.has(catalog.BASELINE):
            references.append(("baseline", catalog.BASELINE, "optimal"))
        if spec.peer and self.has(spec.peer):
            references.append((spec.peer, spec.peer, "optimal"))
        if state != "optimal":
            references.append(("optimal", spec.name, "optimal"))
        return references

    def configuration_section(self, spec, state: str) -> str:
        points = [p for p in self.corner_points if self.figure(spec.name, state, p.key)]
        figure_rows = []
        for point in points:
            figure = self.figure(spec.name, state, point.key)
            cv = "-" if figure.iops_cv is None else f"{figure.iops_cv:.1%}" + (" !" if figure.noisy else "")
            cells = [point.label, fmt(FIGURE_COLUMNS[0][2], figure.get("iops")), cv]
            cells += [fmt(template, figure.get(metric)) for _, metric, template in FIGURE_COLUMNS[1:]]
            figure_rows.append(cells)
        header = ["point", "IOPS", "CV"] + [label for label, _, _ in FIGURE_COLUMNS[1:]]
        text = f"### {spec.label}: {state}\n\n"
        if state == "rebuilding":
            text += self.rebuild_summary(spec.name, points)
        text += table(header, figure_rows)
        references = self.references(spec, state)
        if references:
            names = " / ".join(label for label, _, _ in references)
            ratio_rows = []
            for point in points:
                figure = self.figure(spec.name, state, point.key)
                cells = [point.label]
                for _, metric in RATIO_COLUMNS:
                    parts = []
                    for _, target, reference_state in references:
                        reference = self.figure(target, reference_state, point.key)
                        value = ratio(figure.get(metric), reference.get(metric) if reference else None)
                        parts.append(fmt("{:.2f}", value))
                    cells.append(" / ".join(parts))
                ratio_rows.append(cells)
            text += f"\nRatios to {names} (latency: above 1 is slower):\n\n"
            text += table(["point"] + [label for label, _ in RATIO_COLUMNS], ratio_rows)
        return text

    def rebuild_summary(self, target: str, points) -> str:
        records = [self.figure(target, "rebuilding", p.key).rebuild for p in points]
        records = [r for r in records if r]
        if not records:
            return ""
        fraction = statistics.mean(r["rebuilding_fraction"] for r in records)
        starts = statistics.mean(r["starts"] for r in records)
        return (
            f"A rebuild ran during {fraction:.0%} of the measured time on average, "
            f"{starts:.1f} rebuild starts per run.\n\n"
        )

    def sweep_section(self) -> str:
        targets = [spec for spec in catalog.SPECS
                   if any(self.figure(spec.name, "optimal", p.key) for p in self.sweep_points)]
        if not targets:
            return ""
        stream = self.meta.get("settings", {}).get("write_stream_iops")
        text = (
            "## Latency vs IOPS: 4K random read, QD32\n\n"
            f"Rate-limited steps at fractions of each target's own peak (its 4K random read QD32 "
            f"figure above), then unlimited; alone and beside a stream of 4K random writes at "
            f"{stream} IOPS (QD4).\n\n"
        )
        for spec in targets:
            rows = []
            for point in self.sweep_points:
                figure = self.figure(spec.name, "optimal", point.key)
                if figure is None:
                    continue
                limit = figure.get("rate_limit_iops")
                rows.append([
                    "with writes" if point.write_stream else "reads only",
                    "unlimited" if not limit else f"{limit:,.0f}",
                    fmt("{:,.0f}", figure.get("iops")),
                    fmt("{:,.1f}", figure.get("p50_us")),
                    fmt("{:,.1f}", figure.get("p99_us")),
                    fmt("{:,.1f}", figure.get("p99_9_us")),
                    fmt("{:,.0f}", figure.get("write_stream_iops")),
                    fmt("{:.2f}", figure.get("server_cpu_seconds")),
                ])
            text += f"### {spec.label}\n\n" + table(
                ["load", "read limit IOPS", "read IOPS", "p50 us", "p99 us", "p99.9 us",
                 "write stream IOPS", "server CPU s"],
                rows,
            ) + "\n"
        return text

    def plots_section(self) -> str:
        images = self.meta.get("plots", [])
        if not images:
            return ""
        return "## Plots\n\n" + "".join(f"![{Path(image).stem}]({image})\n\n" for image in images)

    def commands_section(self) -> str:
        return (
            "## Commands\n\n"
            "Every command the run executed is in `commands.log` (with its start time); the fio "
            "job file of every point is in `jobs/`, fio's JSON output of every run in `raw/`, "
            "every run's figures in `results.json`.\n"
        )


def describe_members(settings: dict) -> str:
    if settings.get("devices"):
        return "block devices " + ", ".join(settings["devices"])
    return f"sparse files of {settings.get('member_size_bytes', 0) >> 20} MiB on tmpfs (/dev/shm)"


def write_outputs(out_dir: Path) -> None:
    rows = json.loads((out_dir / "results.json").read_text())
    meta_path = out_dir / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    report = Report(rows, meta)
    try:
        from . import plots
    except ImportError as error:
        say(f"bench: no plots ({error}); `cargo xtask bench` installs matplotlib in target/bench-venv")
        meta["plots"] = []
    else:
        meta["plots"] = plots.draw(report, out_dir)
    report.meta = meta
    (out_dir / "report.md").write_text(report.render())
