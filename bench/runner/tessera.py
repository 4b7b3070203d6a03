"""The Tessera daemon and its virtual drives as benchmark targets.

Everything is set up through the `tessera` CLI, so the command log shows what a user would
type. The rebuild keeper, which polls during measured runs, talks to the management API
directly (HTTP over the Unix socket) because starting a CLI process every 50 ms would itself
cost CPU on a 2-core machine; it issues the same requests as `tessera pd fail` and `tessera pd
online`."""

import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .fio import Connection
from .members import MemberPool
from .shell import Shell, wait_for

KEEPER_POLL_SECONDS = 0.05


class UnixHttpConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket (the management API's transport)."""

    def __init__(self, socket_path: Path):
        super().__init__("localhost", timeout=10)
        self.socket_path = socket_path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))


class ApiClient:
    """The few management API calls the rebuild keeper needs (see docs/api.md)."""

    def __init__(self, socket_path: Path):
        self.connection = UnixHttpConnection(socket_path)

    def request(self, method: str, path: str) -> dict:
        self.connection.request(method, path)
        response = self.connection.getresponse()
        body = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {body.decode(errors='replace')}")
        return json.loads(body) if body else {}

    def close(self) -> None:
        self.connection.close()


class TesseraDaemon:
    """One `tessera serve` for every Tessera target of the run."""

    def __init__(self, shell: Shell, binary: Path, workdir: Path, command_prefix: list[str] | None = None):
        self.shell = shell
        self.binary = binary
        # Run in front of `tessera serve` (e.g. `taskset -c 1`: what it sets, every thread of
        # the daemon inherits).
        self.command_prefix = command_prefix or []
        self.workdir = workdir
        self.api_socket = workdir / "api.sock"
        self.nbd_socket = workdir / "nbd.sock"
        self.process = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.shell.note("the Tessera daemon")
        self.process = self.shell.start(
            [
                *self.command_prefix,
                str(self.binary),
                "serve",
                "--state-dir",
                str(self.workdir / "state"),
                "--api-socket",
                str(self.api_socket),
                "--nbd-socket",
                str(self.nbd_socket),
            ],
            self.workdir / "daemon.log",
        )
        wait_for(self.api_socket.exists, 30, "the daemon's API socket")
        wait_for(self.answers, 30, "the daemon to answer")

    def answers(self) -> bool:
        try:
            self.cli("info", log=False)
            return True
        except Exception:
            return False

    def cli(self, *args: str, log: bool = True) -> str:
        return self.shell.run(
            [str(self.binary), "--api-socket", str(self.api_socket), *args], quiet_log=not log
        )

    def cli_json(self, *args: str, log: bool = True):
        return json.loads(self.cli(*args, "--json", log=log))

    def info(self) -> str:
        return self.cli("info")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except Exception:
            self.process.kill()
            self.process.wait()
        self.process = None


@dataclass
class RebuildRecord:
    """What the rebuild keeper saw during one run, from the daemon's events."""

    wall_ms: float = 0.0
    rebuilding_ms: float = 0.0
    starts: int = 0
    finished: int = 0

    @property
    def rebuilding_fraction(self) -> float:
        return min(1.0, self.rebuilding_ms / self.wall_ms) if self.wall_ms else 0.0

    @property
    def mean_rebuild_ms(self) -> float | None:
        return self.rebuilding_ms / self.finished if self.finished else None


class RebuildKeeper:
    """Keeps a drive group rebuilding for the length of a run. The run starts with the group
    degraded and the keeper brings the failed member back online, which starts a rebuild. A
    rebuild of the benchmark's small members can finish well before the run does, so on each
    `rebuild_finished` event the keeper fails the member again and brings it back online, which
    restarts the rebuild from the start. The share of the run spent rebuilding comes from the
    `rebuild_started`/`rebuild_finished` event times (the daemon's view of a group's state can
    lag a short rebuild)."""

    def __init__(self, target: "TesseraTarget"):
        self.target = target
        self.record = RebuildRecord()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.error: Exception | None = None

    def __enter__(self) -> "RebuildKeeper":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join()
        if self.error is not None:
            raise self.error

    def loop(self) -> None:
        client = ApiClient(self.target.daemon.api_socket)
        pd, dg = self.target.failed_pd, self.target.dg_id
        record = self.record
        started_ms = time.time() * 1000
        rebuild_started_ms = None
        try:
            events = client.request("GET", "/v1/events")
            last_seq = max((event["seq"] for event in events), default=0)
            client.request("POST", f"/v1/pds/{pd}/online")
            while True:
                stopping = self.stopping.wait(KEEPER_POLL_SECONDS)
                for event in client.request("GET", f"/v1/events?since={last_seq}"):
                    last_seq = max(last_seq, event["seq"])
                    if event.get("dg") != dg:
                        continue
                    if event["kind"] == "rebuild_started":
                        record.starts += 1
                        rebuild_started_ms = event["time_unix_ms"]
                    elif event["kind"] == "rebuild_finished" and rebuild_started_ms is not None:
                        record.finished += 1
                        record.rebuilding_ms += event["time_unix_ms"] - rebuild_started_ms
                        rebuild_started_ms = None
                        if not stopping:
                            client.request("POST", f"/v1/pds/{pd}/fail")
                            client.request("POST", f"/v1/pds/{pd}/online")
                if stopping:
                    break
            now_ms = time.time() * 1000
            if rebuild_started_ms is not None:
                record.rebuilding_ms += now_ms - rebuild_started_ms
            record.wall_ms = now_ms - started_ms
        except Exception as error:  # raised in the runner's thread when the run ends
            self.error = error
        finally:
            client.close()


class TesseraTarget:
    """A Tessera virtual drive on its own drive group."""

    kind = "tessera"

    def __init__(
        self,
        name: str,
        label: str,
        level: str,
        member_count: int,
        daemon: TesseraDaemon,
        memory_members: bool = False,
        chunk: str = "64K",
        journal: str | None = None,
    ):
        self.name = name
        self.label = label
        self.level = level
        self.member_count = member_count
        self.daemon = daemon
        self.memory_members = memory_members
        self.chunk = chunk
        # Journal mode for `dg create --journal`, or "device" for a journal drive (one more
        # member file); None keeps the default.
        self.journal = journal
        self.pd_ids: list[int] = []
        self.dg_id = -1
        self.uri = ""
        self.vd_size_bytes = 0
        self.failed_pd = -1

    def setup(self, pool: MemberPool, vd_size_bytes: int) -> None:
        shell = self.daemon.shell
        shell.note(f"{self.label}: members, drive group, virtual drive")
        if self.memory_members:
            # The daemon tells drives apart by path: leading zeros give each in-memory member
            # its own spelling of the same size.
            paths = [
                f"memory://{'0' * index}{pool.member_size_bytes}" for index in range(self.member_count)
            ]
        else:
            extra = 1 if self.journal == "device" else 0
            paths = pool.members(self.name, self.member_count + extra)
        added = self.daemon.cli_json("pd", "add", *paths)
        self.pd_ids = [drive["id"] for drive in added]
        journal = self.journal
        if journal == "device":
            journal = str(self.pd_ids.pop())
        group = self.daemon.cli_json(
            "dg",
            "create",
            "--level",
            self.level,
            "--chunk",
            self.chunk,
            "--name",
            f"dg-{self.name}",
            *(["--journal", journal] if journal else []),
            *[str(pd) for pd in self.pd_ids],
        )
        self.dg_id = group["id"]
        self.wait_for_state("optimal")
        # Several writers at once: --client-jobs opens one connection per fio job.
        drive = self.daemon.cli_json(
            "vd", "create", str(self.dg_id), "--size", str(vd_size_bytes), "--name", self.name,
            "--multi-conn",
        )
        self.uri = drive["nbd_uri"]
        self.vd_size_bytes = vd_size_bytes
        # The member that fails in the degraded and rebuilding states: a data member of the
        # first stripe row.
        self.failed_pd = self.pd_ids[1]

    def connections(self) -> list[Connection]:
        return [Connection.nbd(self.uri, self.vd_size_bytes)]

    def server_pids(self) -> list[int]:
        return [self.daemon.pid]

    def state(self) -> str:
        return self.daemon.cli_json("dg", "describe", str(self.dg_id), log=False)["state"]

    def wait_for_state(self, state: str, timeout_seconds: float = 300) -> None:
        wait_for(
            lambda: self.state() == state,
            timeout_seconds,
            f"drive group {self.dg_id} to be {state}",
            interval_seconds=0.1,
        )

    def fail_member(self) -> None:
        """Optimal -> degraded (`tessera pd fail`)."""
        self.daemon.cli("pd", "fail", str(self.failed_pd))
        self.wait_for_state("degraded")

    def restore(self) -> None:
        """Back to optimal: the failed member comes online and is rebuilt."""
        if self.state() == "degraded":
            self.daemon.cli("pd", "online", str(self.failed_pd))
        self.wait_for_state("optimal")

    def rebuild_keeper(self) -> RebuildKeeper:
        return RebuildKeeper(self)

    def describe(self) -> dict:
        return self.daemon.cli_json("dg", "describe", str(self.dg_id), log=False)

    def teardown(self) -> None:
        """Frees the members (block devices are reused by the next target)."""
        if self.dg_id >= 0:
            self.daemon.cli("dg", "delete", str(self.dg_id), "--force")
            self.dg_id = -1
        if self.pd_ids:
            self.daemon.cli("pd", "remove", *[str(pd) for pd in self.pd_ids])
            self.pd_ids = []

