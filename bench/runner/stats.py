"""Runs of one point folded into one figure each: the mean, and the coefficient of variation of
the throughput (sample standard deviation over the mean) to flag noisy points."""

import math
from dataclasses import dataclass

CV_FLAG = 0.10
METRICS = (
    "iops",
    "mb_per_second",
    "p50_us",
    "p99_us",
    "p99_9_us",
    "server_cpu_seconds",
    "fio_cpu_seconds",
    "kernel_threads_cpu_seconds",
    "other_cpu_seconds",
    "wall_seconds",
    "iops_per_server_cpu_percent",
    "rate_limit_iops",
    "write_stream_iops",
)


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def coefficient_of_variation(values: list[float]) -> float | None:
    """Sample standard deviation over the mean; None with fewer than two runs."""
    if len(values) < 2:
        return None
    average = sum(values) / len(values)
    if average == 0:
        return None
    variance = sum((value - average) ** 2 for value in values) / (len(values) - 1)
    return math.sqrt(variance) / average


@dataclass
class Figure:
    """The folded runs of one (target, state, point)."""

    runs: int
    means: dict[str, float | None]
    iops_cv: float | None
    rebuild: dict | None = None

    def get(self, metric: str) -> float | None:
        return self.means.get(metric)

    @property
    def noisy(self) -> bool:
        return self.iops_cv is not None and self.iops_cv > CV_FLAG


def fold(rows: list[dict]) -> dict[tuple[str, str, str], Figure]:
    grouped: dict[tuple[str, str, str], list[dict]] = {}
    for row in rows:
        grouped.setdefault((row["target"], row["state"], row["point"]), []).append(row)
    figures = {}
    for key, runs in grouped.items():
        means = {}
        for metric in METRICS:
            values = [run[metric] for run in runs if run.get(metric) is not None]
            means[metric] = mean(values)
        rebuild = None
        records = [run["rebuild"] for run in runs if "rebuild" in run]
        if records:
            durations = [r["mean_rebuild_ms"] for r in records if r.get("mean_rebuild_ms")]
            rebuild = {
                "rebuilding_fraction": mean([r["rebuilding_fraction"] for r in records]),
                "starts": mean([r["starts"] for r in records]),
                "mean_rebuild_ms": mean(durations),
            }
        figures[key] = Figure(
            runs=len(runs),
            means=means,
            iops_cv=coefficient_of_variation([run["iops"] for run in runs]),
            rebuild=rebuild,
        )
    return figures


def ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference == 0:
        return None
    return value / reference
