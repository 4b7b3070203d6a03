"""What is measured: the four corners at QD1 and QD32, and the latency-vs-IOPS sweep of 4 KiB
random reads, alone and beside a steady write stream."""

from dataclasses import dataclass

from .fio import Stream

QUEUE_DEPTHS = (1, 32)
SWEEP_QUEUE_DEPTH = 32
# The concurrent write stream of the sweep: 4 KiB random writes at a fixed rate, the same for
# every target (well below what btrfs RAID5 sustains), so curves compare like with like.
WRITE_STREAM_QUEUE_DEPTH = 4


@dataclass(frozen=True)
class Corner:
    """One of the "four corners" (with the 70/30 mix, five)."""

    key: str
    label: str
    rw: str
    block_bytes: int
    # Whose completion latency is reported: reads for reads and the mix, writes for writes.
    latency_direction: str
    rwmixread: int = 50


CORNERS = (
    Corner("randread-4k", "4K random read", "randread", 4096, "read"),
    Corner("randwrite-4k", "4K random write", "randwrite", 4096, "write"),
    Corner("mix7030-4k", "4K 70/30 mix", "randrw", 4096, "read", rwmixread=70),
    Corner("seqread-128k", "128K seq read", "read", 128 << 10, "read"),
    Corner("seqwrite-128k", "128K seq write", "write", 128 << 10, "write"),
)
RANDOM_READ = CORNERS[0]


@dataclass(frozen=True)
class Point:
    """One measured point: a corner at a queue depth, or a step of the sweep (a fraction of the
    target's own peak 4 KiB random-read IOPS; 1.0 is unlimited)."""

    corner: Corner
    iodepth: int
    sweep_fraction: float = 0.0
    write_stream: bool = False

    @property
    def is_sweep(self) -> bool:
        return self.sweep_fraction > 0

    @property
    def key(self) -> str:
        if not self.is_sweep:
            return f"{self.corner.key}-qd{self.iodepth}"
        stream = "with-writes" if self.write_stream else "reads-only"
        return f"sweep-{stream}-{round(self.sweep_fraction * 100):03d}"

    @property
    def label(self) -> str:
        if not self.is_sweep:
            return f"{self.corner.label} QD{self.iodepth}"
        limit = "unlimited" if self.sweep_fraction >= 1 else f"{self.sweep_fraction:.0%} of peak"
        stream = " + write stream" if self.write_stream else ""
        return f"4K random read QD{self.iodepth}, {limit}{stream}"

    def rate_iops(self, peak_iops: float) -> int:
        """The read rate limit of a sweep step (0: none)."""
        if not self.is_sweep or self.sweep_fraction >= 1:
            return 0
        return max(1, round(peak_iops * self.sweep_fraction))

    def streams(self, peak_iops: float, write_stream_iops: int) -> list[Stream]:
        streams = [
            Stream(
                rw=self.corner.rw,
                block_bytes=self.corner.block_bytes,
                iodepth=self.iodepth,
                rwmixread=self.corner.rwmixread,
                rate_iops_total=self.rate_iops(peak_iops),
            )
        ]
        if self.write_stream:
            streams.append(
                Stream(
                    rw="randwrite",
                    block_bytes=4096,
                    iodepth=WRITE_STREAM_QUEUE_DEPTH,
                    rate_iops_total=write_stream_iops,
                )
            )
        return streams


def corner_points(queue_depths=QUEUE_DEPTHS, keys: list[str] | None = None) -> list[Point]:
    """The corners at each queue depth; `keys` keeps only those corners."""
    known = {corner.key for corner in CORNERS}
    unknown = sorted(set(keys or []) - known)
    if unknown:
        raise ValueError(f"unknown corners {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return [
        Point(corner, iodepth)
        for iodepth in queue_depths
        for corner in CORNERS
        if keys is None or corner.key in keys
    ]


def sweep_points(fractions: list[float]) -> list[Point]:
    """Steps up to saturation (the unlimited step is always last), reads alone then with the
    write stream."""
    steps = sorted({fraction for fraction in fractions if 0 < fraction < 1}) + [1.0]
    return [
        Point(RANDOM_READ, SWEEP_QUEUE_DEPTH, sweep_fraction=fraction, write_stream=write_stream)
        for write_stream in (False, True)
        for fraction in steps
    ]
