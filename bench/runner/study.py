"""What the separate studies (`cargo xtask bench rebuild`, `cargo xtask bench scaling`) do
alike before they measure: a result directory named after the study, the command line as the
log and the report show it, and the run's scheduling priority raised."""

import datetime
import shlex
from dataclasses import dataclass
from pathlib import Path

from . import machine, priority

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Study:
    out_dir: Path
    command: str
    started_utc: str
    # What `priority.raise_priority` replaced, for `priority.restore_autogroup` at the end.
    previous_autogroup_nice: int | None
    priority_note: str

    def meta(self) -> dict:
        """The run's description for results.json / meta.json."""
        return {
            "command": self.command,
            "started_utc": self.started_utc,
            "priority": self.priority_note,
            "machine": machine.describe(REPO),
        }

    def finish(self) -> None:
        priority.restore_autogroup(self.previous_autogroup_nice)


def begin(name: str, argv: list[str], out: Path | None, nice: int) -> Study:
    """Makes the result directory (`out`, or bench/results/<UTC stamp>-<name>) and raises the
    run's priority by `nice` (0: unchanged)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    out_dir = out or REPO / "bench" / "results" / f"{now.strftime('%Y%m%d-%H%M%S')}-{name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    previous, note = (None, "not changed")
    if nice:
        previous, note = priority.raise_priority(nice)
    return Study(
        out_dir=out_dir,
        command=(f"cargo xtask bench {name} " + shlex.join(argv)).strip(),
        started_utc=now.isoformat(timespec="seconds"),
        previous_autogroup_nice=previous,
        priority_note=note,
    )
