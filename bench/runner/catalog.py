"""The configurations measured side by side, and which one each is compared with."""

from dataclasses import dataclass
from pathlib import Path

from .btrfs import BtrfsTarget
from .nbdkit import BaselineTarget, MemoryTarget
from .shell import Shell
from .tessera import TesseraDaemon, TesseraTarget
from .workloads import QUEUE_DEPTHS


@dataclass(frozen=True)
class Spec:
    name: str
    label: str
    # The btrfs configuration a user would pick instead (None: none is comparable).
    peer: str | None
    # Lifecycle states measured beyond "optimal".
    lifecycle: bool = False
    queue_depths: tuple[int, ...] = QUEUE_DEPTHS


SPECS = (
    Spec("raid0", "Tessera RAID0, 4 members", "btrfs-raid5"),
    Spec("raid10", "Tessera RAID10 (near-2), 4 members", "btrfs-raid1"),
    Spec("raid5", "Tessera RAID5 4+1", "btrfs-raid5", lifecycle=True),
    Spec("raid6", "Tessera RAID6 4+2", "btrfs-raid5", lifecycle=True),
    # The write journal's cost (issue 6): the same groups with the journal always on. The plain
    # raid5/raid6 targets run the default mode, degrade_only, which journals nothing while
    # optimal.
    Spec("raid5-journal", "Tessera RAID5 4+1, journal always_on", "btrfs-raid5"),
    Spec("raid6-journal", "Tessera RAID6 4+2, journal always_on", "btrfs-raid5"),
    # The same with the journal on a dedicated journal drive (one more member file).
    Spec("raid5-journal-device", "Tessera RAID5 4+1, journal on a journal drive", "btrfs-raid5"),
    Spec("raid6-journal-device", "Tessera RAID6 4+2, journal on a journal drive", "btrfs-raid5"),
    # The transport target: RAID0 over in-memory members against nbdkit memory, QD32 only.
    Spec("raid0-memory", "Tessera RAID0, 4 in-memory members", "memory", queue_depths=(32,)),
    Spec("baseline", "Baseline: nbdkit file per member (5 members, aggregated)", None),
    Spec("memory", "Transport ceiling: nbdkit memory", None),
    Spec("btrfs-raid5", "btrfs RAID5 data, RAID1 metadata, 5 loop devices", None),
    Spec("btrfs-raid1", "btrfs RAID1 data and metadata, 4 loop devices", None),
)
SPEC_BY_NAME = {spec.name: spec for spec in SPECS}
ALL_NAMES = tuple(spec.name for spec in SPECS)
BASELINE = "baseline"
LIFECYCLE_STATES = ("optimal", "degraded", "rebuilding")


def build_target(name: str, shell: Shell, workdir: Path, daemon: TesseraDaemon):
    label = SPEC_BY_NAME[name].label
    if name == "raid0":
        return TesseraTarget(name, label, "0", 4, daemon)
    if name == "raid10":
        return TesseraTarget(name, label, "10", 4, daemon)
    if name == "raid5":
        return TesseraTarget(name, label, "5", 5, daemon)
    if name == "raid6":
        return TesseraTarget(name, label, "6", 6, daemon)
    if name == "raid5-journal":
        return TesseraTarget(name, label, "5", 5, daemon, journal="always_on")
    if name == "raid6-journal":
        return TesseraTarget(name, label, "6", 6, daemon, journal="always_on")
    if name == "raid5-journal-device":
        return TesseraTarget(name, label, "5", 5, daemon, journal="device")
    if name == "raid6-journal-device":
        return TesseraTarget(name, label, "6", 6, daemon, journal="device")
    if name == "raid0-memory":
        return TesseraTarget(name, label, "0", 4, daemon, memory_members=True)
    if name == "baseline":
        return BaselineTarget(name, label, 5, shell, workdir)
    if name == "memory":
        return MemoryTarget(name, label, shell, workdir)
    if name == "btrfs-raid5":
        return BtrfsTarget(name, label, "raid5", 5, shell, workdir)
    if name == "btrfs-raid1":
        return BtrfsTarget(name, label, "raid1", 4, shell, workdir)
    raise ValueError(f"unknown target {name!r} (known: {', '.join(ALL_NAMES)})")
