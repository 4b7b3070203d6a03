#!/usr/bin/env python3
"""Thin virtual drives against their targets (issue 8), in one run on one machine.

Starts `target/release/tessera serve` on member files in /dev/shm, and measures with fio over
NBD:

- write amplification (member bytes / host bytes) of 4 KiB random writes on a RAID5 4+1 thin
  drive at 70% of its physical space, for 2:1 compressible data and for incompressible data;
- 4 KiB random write and read IOPS (QD32) of a thin drive against a thick drive on the same
  RAID5 group;
- the block map's memory per TiB of logical data;
- the rebuild time of a RAID5 group holding one thin drive 25% full against 90% full (space
  the drive never used or freed is trimmed in the group, and a rebuild skips it).

Prints a markdown report with each figure and its ratio to the target. Usage:

    cargo build --release -p tessera-cli && python3 bench/thin.py [--runtime 30]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESSERA = REPO / "target" / "release" / "tessera"
MIB = 1 << 20

COMPRESSIBLE = ["--buffer_compress_percentage=50", "--buffer_compress_chunk=4k", "--refill_buffers"]
INCOMPRESSIBLE = ["--buffer_compress_percentage=0", "--refill_buffers"]


class Daemon:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.api = workdir / "api.sock"
        self.nbd = workdir / "nbd.sock"
        log = open(workdir / "daemon.log", "w")
        self.process = subprocess.Popen(
            [str(TESSERA), "serve", "--state-dir", str(workdir / "state"),
             "--api-socket", str(self.api), "--nbd-socket", str(self.nbd)],
            stdout=log, stderr=subprocess.STDOUT)
        for _ in range(100):
            if self.api.exists():
                return
            time.sleep(0.1)
        raise SystemExit("the daemon did not start; see daemon.log")

    def cli(self, *args: str) -> str:
        env = dict(os.environ, TESSERA_API_SOCKET=str(self.api))
        done = subprocess.run([str(TESSERA), *args], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"tessera {' '.join(args)} failed: {done.stderr}")
        return done.stdout

    def json(self, *args: str) -> dict:
        return json.loads(self.cli(*args, "--json"))

    def group(self, members: int, member_bytes: int) -> str:
        paths = []
        for _ in range(members):
            path = self.workdir / f"member{len(list(self.workdir.glob('member*')))}.img"
            with open(path, "wb") as f:
                f.truncate(member_bytes)
            paths.append(str(path))
        ids = self.cli("pd", "add", *paths).split()
        return str(self.json("dg", "create", "--level", "5", "--chunk", "64K", *ids)["id"])

    def uri(self, vd: str) -> str:
        return f"nbd+unix:///{vd}?socket={self.nbd}"

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)


def fio(uri: str, *options: str) -> dict:
    output = Path("/dev/shm/tessera-thin-bench/fio.json")
    argv = ["fio", "--name=bench", "--ioengine=nbd", f"--uri={uri}", "--output-format=json",
            f"--output={output}", *options]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"fio failed: {done.stderr}{done.stdout[-2000:]}")
    return json.loads(output.read_text())["jobs"][0]


def fill(uri: str, size_bytes: int, data: list[str]):
    fio(uri, "--rw=write", "--bs=1m", "--iodepth=8", f"--size={size_bytes}", "--end_fsync=1",
        *data)


def random_io(uri: str, rw: str, runtime: int, data: list[str]) -> float:
    job = fio(uri, f"--rw={rw}", "--bs=4k", "--iodepth=32", "--time_based",
              f"--runtime={runtime}", "--ramp_time=2", "--norandommap", "--randrepeat=0",
              *data)
    return job["write" if "write" in rw else "read"]["iops"]


def rebuild_seconds(daemon: Daemon, member_bytes: int, full: float) -> tuple[float, float]:
    """A group holding one thin drive filled to `full` of its capacity; fails a member, gives
    a fresh one, and times the rebuild. Returns (seconds, measured fullness)."""
    dg = daemon.group(5, member_bytes)
    daemon.cli("dg", "set", dg, "--rebuild-rate", "100")
    name = f"rebuild{dg}"
    daemon.cli("vd", "create", dg, "--size", str(member_bytes * 4), "--name", name, "--thin",
               "--compression", "none")
    capacity = thin_stats(daemon, name)["capacity_bytes"]
    fill(daemon.uri(name), int(capacity * full) // MIB * MIB, INCOMPRESSIBLE)
    measured = 1 - thin_stats(daemon, name)["free_bytes"] / capacity
    members = daemon.json("dg", "describe", dg)["members"]
    old = str(next(m for m in members if m["role"] == 1)["pd"])
    spare = daemon.workdir / f"spare{dg}.img"
    with open(spare, "wb") as f:
        f.truncate(member_bytes)
    new = daemon.cli("pd", "add", str(spare)).split()[0]
    daemon.cli("pd", "fail", old)
    started = time.monotonic()
    daemon.cli("pd", "replace", old, new)
    while daemon.json("dg", "describe", dg)["state"] != "optimal":
        if time.monotonic() - started > 900:
            raise SystemExit("the rebuild did not finish in 15 minutes")
        time.sleep(0.05)
    return time.monotonic() - started, measured


def thin_stats(daemon: Daemon, vd: str) -> dict:
    return daemon.json("vd", "describe", vd)["stats"]


def write_amplification(daemon: Daemon, dg: str, name: str, data: list[str], ratio: float,
                        runtime: int, physical: int) -> dict:
    # Logical size such that the data, once written, takes 70% of the physical space.
    logical = int(physical * 0.7 * ratio) // MIB * MIB
    daemon.cli("vd", "create", dg, "--size", str(logical), "--name", name, "--thin",
               "--physical", str(physical))
    uri = daemon.uri(name)
    fill(uri, logical, data)
    before = thin_stats(daemon, name)
    iops = random_io(uri, "randwrite", runtime, data)
    after = thin_stats(daemon, name)
    host = after["host_bytes_written"] - before["host_bytes_written"]
    member = after["member_bytes_written"] - before["member_bytes_written"]
    cleaning = after["cleaning_bytes_written"] - before["cleaning_bytes_written"]
    return {
        "logical": logical, "physical": physical, "iops": iops,
        "host": host, "member": member, "cleaning": cleaning,
        "wa": member / host if host else float("nan"),
        "full": 1 - after["free_bytes"] / after["capacity_bytes"],
        "compression": after["compression_ratio"],
        "map_bytes": after.get("map_memory_bytes", 0),
        "logical_used": after["logical_used_bytes"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", type=int, default=30, help="seconds per measured point")
    parser.add_argument("--member-size", type=int, default=512, help="MiB per member file")
    options = parser.parse_args()
    if not TESSERA.exists():
        raise SystemExit(f"{TESSERA} is missing: cargo build --release -p tessera-cli")
    workdir = Path("/dev/shm/tessera-thin-bench")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    daemon = Daemon(workdir)
    member_bytes = options.member_size * MIB
    runtime = options.runtime
    try:
        # Write amplification at 70% full, one group per data kind.
        physical = member_bytes * 2
        wa_compressible = write_amplification(
            daemon, daemon.group(5, member_bytes), "wa2", COMPRESSIBLE, 2.0, runtime, physical)
        wa_incompressible = write_amplification(
            daemon, daemon.group(5, member_bytes), "wa1", INCOMPRESSIBLE, 1.0, runtime, physical)

        # Thin against thick on one RAID5 group, same size, same data.
        dg = daemon.group(5, member_bytes)
        size = member_bytes // 2
        daemon.cli("vd", "create", dg, "--size", str(size), "--name", "thick")
        daemon.cli("vd", "create", dg, "--size", str(size), "--name", "thin", "--thin",
                   "--physical", str(size * 2))
        figures = {}
        for name in ["thick", "thin"]:
            fill(daemon.uri(name), size, COMPRESSIBLE)
        for name in ["thick", "thin"]:
            figures[(name, "randwrite")] = random_io(daemon.uri(name), "randwrite", runtime,
                                                     COMPRESSIBLE)
        for name in ["thick", "thin"]:
            figures[(name, "randread")] = random_io(daemon.uri(name), "randread", runtime, [])

        rebuild_quarter, full_quarter = rebuild_seconds(daemon, member_bytes, 0.25)
        rebuild_full, full_full = rebuild_seconds(daemon, member_bytes, 0.9)
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    write_ratio = figures[("thin", "randwrite")] / figures[("thick", "randwrite")]
    read_ratio = figures[("thin", "randread")] / figures[("thick", "randread")]
    map_per_tib = (wa_compressible["map_bytes"] / wa_compressible["logical_used"]) * (1 << 40)
    print("# Thin virtual drives: figures and targets\n")
    print(f"RAID5 4+1, 64 KiB chunks, {options.member_size} MiB member files in /dev/shm; "
          f"fio 4 KiB QD32, {runtime} s per point; LZ4.\n")
    print("| figure | measured | target | ratio to target |")
    print("|---|---|---|---|")
    wa = wa_compressible["wa"]
    print(f"| write amplification, 2:1 compressible, {wa_compressible['full']:.0%} full "
          f"(compression {wa_compressible['compression']:.2f}x) | {wa:.3f} | <= 0.6 | "
          f"{wa / 0.6:.2f} |")
    print(f"| write amplification, incompressible, {wa_incompressible['full']:.0%} full | "
          f"{wa_incompressible['wa']:.3f} | reported | - |")
    print(f"| 4 KiB random write IOPS thin / thick | {write_ratio:.2f} "
          f"({figures[('thin', 'randwrite')]:.0f} / {figures[('thick', 'randwrite')]:.0f}) | "
          f">= 1.5 | {write_ratio / 1.5:.2f} |")
    print(f"| 4 KiB random read IOPS thin / thick | {read_ratio:.2f} "
          f"({figures[('thin', 'randread')]:.0f} / {figures[('thick', 'randread')]:.0f}) | "
          f">= 0.85 | {read_ratio / 0.85:.2f} |")
    print(f"| map memory per TiB of logical data | {map_per_tib / (1 << 30):.2f} GiB | <= 3 GiB | "
          f"{map_per_tib / (3 << 30):.2f} |")
    rebuild_ratio = rebuild_quarter / rebuild_full
    print(f"| rebuild time, thin drive {full_quarter:.0%} / {full_full:.0%} full | "
          f"{rebuild_ratio:.2f} ({rebuild_quarter:.1f} s / {rebuild_full:.1f} s) | <= 0.35 | "
          f"{rebuild_ratio / 0.35:.2f} |")
    print("\nCleaning during the compressible random-write phase: "
          f"{wa_compressible['cleaning'] / MIB:.0f} MiB for {wa_compressible['host'] / MIB:.0f} "
          "MiB written by the host.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
