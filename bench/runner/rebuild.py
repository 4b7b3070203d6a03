"""The rebuild benchmarks: how fast a member is rebuilt against the physical limit, what a
rebuild costs hosts at each rate setting, and how much a rebuild saves by skipping regions that
were never written. `cargo xtask bench rebuild` (or `python3 bench/run.py rebuild`); the method
and recorded figures are in docs/benchmarks.md.

Every figure comes from the daemon's own events (`rebuild_started`/`rebuild_finished` times)
and from fio: the physical limit is fio on the member files themselves (the survivors read at
once, the replacement written), the host load is fio over NBD."""

import argparse
import json
import signal
import time
from pathlib import Path

from .study import begin
from .fio import parse_output
from .shell import Shell, say, wait_for
from .tessera import ApiClient, TesseraDaemon

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
IDLE_SETTLE_SECONDS = 3.0


def parse_options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cargo xtask bench rebuild",
        description="Rebuild throughput of a RAID5 4+1 group over member files (tmpfs) against "
        "the physical limit, host IOPS during rebuilds at several rates, and the rebuild time of "
        "a 25%%-written group against a fully written one.",
    )
    parser.add_argument("--member-size", default="1G", help="size of each member file (default 1G)")
    parser.add_argument("--rates", default="10,30,60,100",
                        help="rebuild rates to measure under host load (default 10,30,60,100)")
    parser.add_argument("--load-seconds", type=float, default=10.0,
                        help="seconds of host load (4 KiB random 70/30, QD32) on the optimal "
                        "group (default 10); during rebuilds the load lasts as long as the rebuild")
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm/tessera-bench-rebuild"))
    parser.add_argument("--tessera", type=Path, default=REPO / "target/release/tessera")
    parser.add_argument("--out", type=Path, help="result directory (default bench/results/<stamp>-rebuild)")
    parser.add_argument("--nice", type=int, default=-10, help="scheduling priority (default -10)")
    options = parser.parse_args(argv)
    options.rates = [int(rate) for rate in options.rates.split(",") if rate.strip()]
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = options.member_size.strip().upper()
    options.member_bytes = int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)
    return options


class Group:
    """A RAID5 4+1 drive group over fresh member files, with one virtual drive filling it."""

    def __init__(self, bench: "RebuildBench", name: str):
        self.bench = bench
        self.name = name
        daemon = bench.daemon
        paths = [bench.new_file(f"{name}-m{index}") for index in range(5)]
        self.pds = [drive["id"] for drive in daemon.cli_json("pd", "add", *paths)]
        group = daemon.cli_json("dg", "create", "--level", "5", "--chunk", "64K", "--name", name,
                                *[str(pd) for pd in self.pds])
        self.dg = group["id"]
        self.vd_bytes = group["free_bytes"] // MIB * MIB
        drive = daemon.cli_json("vd", "create", str(self.dg), "--size", str(self.vd_bytes),
                                "--name", name)
        self.uri = drive["nbd_uri"]
        self.member_data_bytes = group["size_bytes"] // 4

    def describe(self) -> dict:
        return self.bench.daemon.cli_json("dg", "describe", str(self.dg), log=False)

    def fill(self, fraction: float) -> None:
        """Writes the first `fraction` of the virtual drive sequentially."""
        size = int(self.vd_bytes * fraction) // MIB * MIB
        self.bench.fio(["--name=fill", "--ioengine=nbd", f"--uri={self.uri}", "--rw=write",
                        "--bs=1M", "--iodepth=8", f"--size={size}", "--end_fsync=1"])

    def member_files(self) -> list[str]:
        return [member["path"] for member in self.describe()["members"]]

    def start_rebuild(self, role: int = 1) -> tuple[int, str]:
        """Fails the member holding `role` and replaces it with a fresh (sparse) file: the
        rebuild starts. Returns the old member's pd and the new member's path."""
        daemon = self.bench.daemon
        member = next(m for m in self.describe()["members"] if m["role"] == role)
        old = member["pd"]
        path = self.bench.new_file(f"{self.name}-r")
        new = daemon.cli_json("pd", "add", path)[0]["id"]
        daemon.cli("pd", "fail", str(old))
        daemon.cli("pd", "replace", str(old), str(new))
        return old, path

    def retire(self, pd: int, path: str) -> None:
        self.bench.daemon.cli("pd", "remove", str(pd))
        Path(path).unlink(missing_ok=True)


class RebuildBench:
    def __init__(self, options: argparse.Namespace, out_dir: Path):
        self.options = options
        self.out_dir = out_dir
        self.shell = Shell(out_dir / "commands.log")
        self.daemon = TesseraDaemon(self.shell, options.tessera, options.workdir / "tessera")
        self.files = 0
        self.results: dict = {}

    def new_file(self, stem: str) -> str:
        self.files += 1
        path = self.options.workdir / f"{stem}-{self.files}.img"
        self.shell.run(["truncate", "-s", str(self.options.member_bytes), str(path)])
        return str(path)

    def fio(self, args: list[str]) -> list:
        output = self.shell.run(["fio", "--output-format=json", "--group_reporting", *args])
        return parse_output(output)

    def rebuild_seconds(self, dg: int, since_seq: int, timeout: float = 900) -> float:
        """Waits for the rebuild of `dg` that started after event `since_seq` to finish; its
        duration from the daemon's events."""
        client = ApiClient(self.daemon.api_socket)
        try:
            def finished():
                events = client.request("GET", f"/v1/events?since={since_seq}")
                started = [e for e in events if e.get("dg") == dg and e["kind"] == "rebuild_started"]
                done = [e for e in events if e.get("dg") == dg and e["kind"] == "rebuild_finished"]
                if started and done:
                    return (done[-1]["time_unix_ms"] - started[0]["time_unix_ms"]) / 1000
                return None
            return wait_for(finished, timeout, f"the rebuild of drive group {dg}", interval_seconds=0.02)
        finally:
            client.close()

    def last_seq(self) -> int:
        events = self.daemon.cli_json("events", log=False)
        return max((event["seq"] for event in events), default=0)

    def physical_limit(self, group: Group) -> dict:
        """fio on the member files themselves, with O_DIRECT through io_uring as the daemon does
        it: the four survivors read at once, and a fresh replacement file written; a rebuild
        cannot beat the slower of the two."""
        files = group.member_files()
        survivors = [path for index, path in enumerate(files) if index != 1]
        jobs = []
        for index, path in enumerate(survivors):
            jobs += [f"--name=read{index}", f"--filename={path}", "--rw=read", "--bs=1M",
                     "--ioengine=io_uring", "--iodepth=8", "--direct=1",
                     f"--size={self.options.member_bytes}"]
        read = self.fio(jobs)[0].read.bw_bytes_per_second
        spare = self.new_file("limit")
        write = self.fio(["--name=write", f"--filename={spare}", "--rw=write", "--bs=1M",
                          "--ioengine=io_uring", "--iodepth=8", "--direct=1",
                          f"--size={self.options.member_bytes}"])[0]
        Path(spare).unlink()
        write_bw = write.write.bw_bytes_per_second
        return {
            "survivor_read_bytes_per_second_total": read,
            "survivor_read_bytes_per_second_each": read / len(survivors),
            "replacement_write_bytes_per_second": write_bw,
            "limit_bytes_per_second": min(write_bw, read / len(survivors)),
        }

    def idle_rebuild(self, group: Group, label: str) -> dict:
        # Idle means idle: the rate pacing looks back one window at host I/O, and write-intent
        # bits of the fill are still being cleared for a moment.
        time.sleep(IDLE_SETTLE_SECONDS)
        seq = self.last_seq()
        old, path = group.start_rebuild()
        seconds = self.rebuild_seconds(group.dg, seq)
        old_path = next(p for p in self.daemon.cli_json("pd", "list") if p["id"] == old)["path"]
        group.retire(old, old_path)
        # The replacement is a sparse file on tmpfs: its allocated bytes are what the rebuild
        # wrote (regions never written are skipped).
        written = Path(path).stat().st_blocks * 512
        result = {
            "seconds": seconds,
            "member_data_bytes": group.member_data_bytes,
            "replacement_written_bytes": written,
            "bytes_per_second": group.member_data_bytes / seconds,
        }
        say(f"rebuild ({label}): {seconds:.2f} s, {written / MIB:,.0f} MiB written to the "
            f"replacement, {result['bytes_per_second'] / MIB:,.0f} MiB/s of member data")
        return result

    def load_args(self, group: Group, seconds: float) -> list[str]:
        return ["fio", "--output-format=json", "--group_reporting", "--name=load",
                "--ioengine=nbd", f"--uri={group.uri}", "--rw=randrw", "--rwmixread=70",
                "--bs=4k", "--iodepth=32", "--time_based", f"--runtime={seconds:g}",
                f"--size={group.vd_bytes}"]

    def host_load(self, group: Group, seconds: float) -> dict:
        return load_figures(self.shell.run(self.load_args(group, seconds)))

    def loaded_rebuild(self, group: Group, rate: int, optimal_iops: float) -> dict:
        self.daemon.cli("dg", "set", str(group.dg), "--rebuild-rate", str(rate))
        # The load starts first and is stopped (SIGINT: fio reports what it did) when the
        # rebuild ends, so its figures cover the rebuild and nothing else.
        load = self.shell.start_capture(
            self.load_args(group, 3600), self.out_dir / "load-stderr.log"
        )
        time.sleep(1.0)
        seq = self.last_seq()
        old, _ = group.start_rebuild()
        seconds = self.rebuild_seconds(group.dg, seq)
        load.send_signal(signal.SIGINT)
        output, _ = load.communicate(timeout=60)
        load = load_figures(output)
        old_path = next(p for p in self.daemon.cli_json("pd", "list") if p["id"] == old)["path"]
        group.retire(old, old_path)
        result = {
            "rate_percent": rate,
            "host_iops": load["iops"],
            "host_iops_ratio": load["iops"] / optimal_iops,
            "read_p99_us": load["read_p99_us"],
            "rebuild_seconds": seconds,
        }
        say(f"rate {rate}%: host {load['iops']:,.0f} IOPS ({result['host_iops_ratio']:.2f}x optimal), "
            f"rebuild {seconds:.1f} s")
        return result

    def run(self) -> None:
        options = self.options
        self.daemon.start()
        self.results["tessera_info"] = self.daemon.info()
        full = Group(self, "full")
        say("filling the first group's virtual drive")
        full.fill(1.0)
        wait_for(lambda: full.describe()["state"] == "optimal", 60, "an optimal group")
        limit = self.physical_limit(full)
        self.results["physical_limit"] = limit
        say(f"physical limit: {limit['limit_bytes_per_second'] / MIB:,.0f} MiB/s per member")
        idle = self.idle_rebuild(full, "idle, 100% written")
        idle["ratio_to_limit"] = idle["bytes_per_second"] / limit["limit_bytes_per_second"]
        self.results["idle_full"] = idle
        optimal = self.host_load(full, options.load_seconds)
        self.results["optimal_host"] = optimal
        say(f"optimal group: {optimal['iops']:,.0f} IOPS")
        self.results["loaded"] = [
            self.loaded_rebuild(full, rate, optimal["iops"]) for rate in options.rates
        ]
        self.daemon.cli("dg", "set", str(full.dg), "--rebuild-rate", "30")
        quarter = Group(self, "quarter")
        quarter.fill(0.25)
        partial = self.idle_rebuild(quarter, "idle, 25% written")
        partial["ratio_to_full"] = partial["seconds"] / idle["seconds"]
        self.results["idle_quarter"] = partial


def load_figures(fio_output: str) -> dict:
    load = parse_output(fio_output)[0]
    return {"iops": load.read.iops + load.write.iops, "read_p99_us": load.read.clat_us.get("p99")}


def report(results: dict) -> str:
    limit = results["physical_limit"]
    idle = results["idle_full"]
    quarter = results["idle_quarter"]
    lines = [
        "| measure | figure | target |",
        "|---|---:|---:|",
        f"| survivors read (4 at once), per member | {limit['survivor_read_bytes_per_second_each'] / MIB:,.0f} MiB/s | |",
        f"| replacement written | {limit['replacement_write_bytes_per_second'] / MIB:,.0f} MiB/s | |",
        f"| idle rebuild, 100% written | {idle['bytes_per_second'] / MIB:,.0f} MiB/s ({idle['seconds']:.2f} s), "
        f"**{idle['ratio_to_limit']:.2f}x** the limit | >= 0.8x |",
        f"| idle rebuild, 25% written | {quarter['seconds']:.2f} s, **{quarter['ratio_to_full']:.2f}x** the full one's time | <= 0.35x |",
        f"| host 4K random 70/30 QD32, optimal | {results['optimal_host']['iops']:,.0f} IOPS | |",
        "",
        "| rebuild rate | host IOPS during rebuild | vs optimal (target >= 0.7x at 30%) | read p99 | rebuild time |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in results["loaded"]:
        p99 = f"{row['read_p99_us']:,.0f} us" if row["read_p99_us"] else "-"
        lines.append(
            f"| {row['rate_percent']}% | {row['host_iops']:,.0f} | {row['host_iops_ratio']:.2f}x | {p99} "
            f"| {row['rebuild_seconds']:.1f} s |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    options = parse_options(argv)
    study = begin("rebuild", argv, options.out, options.nice)
    out_dir = study.out_dir
    bench = RebuildBench(options, out_dir)
    bench.shell.note(study.command)
    bench.results.update({**study.meta(), "member_bytes": options.member_bytes})
    bench.shell.run(["rm", "-rf", str(options.workdir)])
    options.workdir.mkdir(parents=True)
    try:
        bench.run()
    finally:
        bench.daemon.stop()
        bench.shell.run(["rm", "-rf", str(options.workdir)])
        study.finish()
        (out_dir / "results.json").write_text(json.dumps(bench.results, indent=1))
    text = report(bench.results)
    (out_dir / "report.md").write_text(f"# Rebuild benchmark\n\n`{study.command}`\n\n{text}")
    print(text)
    say(f"bench: report {out_dir / 'report.md'}")
    return 0
