"""PNG plots: latency-vs-IOPS curves, and the four corners per lifecycle state as throughput
relative to the baseline."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import catalog  # noqa: E402
from .stats import ratio  # noqa: E402
from .workloads import CORNERS  # noqa: E402


def draw(report, out_dir: Path) -> list[str]:
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(exist_ok=True)
    images = []
    path = latency_curves(report, plot_dir)
    if path:
        images.append(path)
    for state in catalog.LIFECYCLE_STATES:
        path = corners(report, state, plot_dir)
        if path:
            images.append(path)
    return [str(Path(image).relative_to(out_dir)) for image in images]


def latency_curves(report, plot_dir: Path) -> Path | None:
    figure, axes = plt.subplots(2, 2, figsize=(12, 9), sharex="row")
    drawn = False
    for row, write_stream in enumerate((False, True)):
        for column, (metric, label) in enumerate((("p50_us", "p50"), ("p99_9_us", "p99.9"))):
            axis = axes[row][column]
            for spec in catalog.SPECS:
                points = [p for p in report.sweep_points if p.write_stream == write_stream]
                values = [report.figure(spec.name, "optimal", p.key) for p in points]
                pairs = [(f.get("iops"), f.get(metric)) for f in values if f and f.get(metric)]
                if not pairs:
                    continue
                drawn = True
                axis.plot([x / 1000 for x, _ in pairs], [y for _, y in pairs], marker="o", label=spec.name)
            stream = "with a 4K random-write stream" if write_stream else "reads only"
            axis.set_title(f"4K random read QD32, {stream}: {label}")
            axis.set_xlabel("read IOPS (thousands)")
            axis.set_ylabel(f"{label} completion latency (us)")
            axis.set_yscale("log")
            axis.grid(True, which="both", alpha=0.3)
            if axis.get_legend_handles_labels()[0]:
                axis.legend(fontsize=8)
    if not drawn:
        plt.close(figure)
        return None
    figure.tight_layout()
    path = plot_dir / "latency-vs-iops.png"
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def corners(report, state: str, plot_dir: Path) -> Path | None:
    """Grouped bars per corner: each series' throughput over the baseline's (optimal)."""
    if state == "optimal":
        series = [(spec.name, spec.name, "optimal") for spec in catalog.SPECS
                  if spec.name != catalog.BASELINE and report.has(spec.name)]
    else:
        series = []
        for spec in catalog.SPECS:
            if report.has(spec.name, state):
                series.append((f"{spec.name} optimal", spec.name, "optimal"))
                series.append((f"{spec.name} {state}", spec.name, state))
    if not series:
        return None
    figure, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
    width = 0.8 / len(series)
    for axis, qd in zip(axes, (1, 32)):
        for index, (label, target, target_state) in enumerate(series):
            heights = []
            for corner in CORNERS:
                key = f"{corner.key}-qd{qd}"
                ours = report.figure(target, target_state, key)
                base = report.figure(catalog.BASELINE, "optimal", key)
                value = ratio(ours.get("iops") if ours else None, base.get("iops") if base else None)
                heights.append(value or 0.0)
            offsets = [c + (index - (len(series) - 1) / 2) * width for c in range(len(CORNERS))]
            hatch = "//" if target_state != "optimal" else None
            axis.bar(offsets, heights, width, label=label, hatch=hatch)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xticks(range(len(CORNERS)))
        axis.set_xticklabels([corner.label for corner in CORNERS], rotation=15)
        axis.set_title(f"QD{qd}, {state}")
        axis.set_ylabel("throughput / baseline")
        axis.grid(True, axis="y", alpha=0.3)
    axes[1].legend(fontsize=8, ncol=2)
    figure.tight_layout()
    path = plot_dir / f"corners-{state}.png"
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
