"""The reference NBD servers: the baseline (`nbdkit file` on each member, one fio job per
member, aggregated: the members without RAID) and the transport ceiling (`nbdkit memory`, the
thinnest NBD server)."""

import subprocess
from pathlib import Path

from .fio import Connection
from .members import MemberPool
from .shell import Shell, wait_for


def start_nbdkit(shell: Shell, socket_path: Path, log_path: Path, plugin: list[str]):
    """nbdkit in the foreground (so its pid is the server's), on a Unix socket."""
    process = shell.start(["nbdkit", "--foreground", "--unix", str(socket_path), *plugin], log_path)
    wait_for(socket_path.exists, 30, f"nbdkit's socket {socket_path}")
    return process


def stop_processes(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class BaselineTarget:
    """Each member exported by its own `nbdkit file`; fio runs one job per member at the
    point's queue depth, and the figures are the group's aggregate."""

    kind = "baseline"

    def __init__(self, name: str, label: str, member_count: int, shell: Shell, workdir: Path):
        self.name = name
        self.label = label
        self.member_count = member_count
        self.shell = shell
        self.workdir = workdir / name
        self.processes: list[subprocess.Popen] = []
        self.sockets: list[Path] = []
        self.size_bytes = 0
        self.paths: list[str] = []

    def setup(self, pool: MemberPool, vd_size_bytes: int) -> None:
        del vd_size_bytes
        self.shell.note(f"{self.label}: one nbdkit file per member")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.paths = pool.members(self.name, self.member_count)
        self.size_bytes = pool.member_size_bytes
        for index, path in enumerate(self.paths):
            socket_path = self.workdir / f"nbdkit{index}.sock"
            process = start_nbdkit(
                self.shell, socket_path, self.workdir / f"nbdkit{index}.log", ["file", path]
            )
            self.processes.append(process)
            self.sockets.append(socket_path)

    def connections(self) -> list[Connection]:
        return [
            Connection.nbd(f"nbd+unix:///?socket={socket_path}", self.size_bytes)
            for socket_path in self.sockets
        ]

    def server_pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def teardown(self) -> None:
        stop_processes(self.processes)
        self.processes = []


class MemoryTarget:
    """`nbdkit memory`: no storage work at all, so what it costs is the NBD transport."""

    kind = "memory"

    def __init__(self, name: str, label: str, shell: Shell, workdir: Path):
        self.name = name
        self.label = label
        self.shell = shell
        self.workdir = workdir / name
        self.process = None
        self.socket_path = self.workdir / "nbdkit.sock"
        self.size_bytes = 0

    def setup(self, pool: MemberPool, vd_size_bytes: int) -> None:
        del pool
        self.shell.note(f"{self.label}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.size_bytes = vd_size_bytes
        self.process = start_nbdkit(
            self.shell,
            self.socket_path,
            self.workdir / "nbdkit.log",
            ["memory", f"size={vd_size_bytes}"],
        )

    def connections(self) -> list[Connection]:
        return [Connection.nbd(f"nbd+unix:///?socket={self.socket_path}", self.size_bytes)]

    def server_pids(self) -> list[int]:
        return [self.process.pid] if self.process else []

    def teardown(self) -> None:
        if self.process is not None:
            stop_processes([self.process])
            self.process = None
