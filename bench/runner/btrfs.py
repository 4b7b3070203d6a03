"""The peer a user might pick instead: btrfs with RAID5 (or RAID1) data and RAID1 metadata
across loop devices over the same kind of member files, and fio with O_DIRECT on a file in it.
Its storage work happens in the kernel (fio's system time, loop and btrfs worker threads), so
its "server" CPU is the kernel threads' time."""

from pathlib import Path

from .fio import Connection
from .members import MemberPool
from .shell import Shell


class BtrfsTarget:
    kind = "btrfs"

    def __init__(
        self, name: str, label: str, data_profile: str, member_count: int, shell: Shell, workdir: Path
    ):
        self.name = name
        self.label = label
        self.data_profile = data_profile
        self.member_count = member_count
        self.shell = shell
        self.workdir = workdir / name
        self.mountpoint = self.workdir / "mnt"
        self.loop_devices: list[str] = []
        self.mounted = False
        self.size_bytes = 0

    @property
    def file_path(self) -> Path:
        return self.mountpoint / "fio.dat"

    def setup(self, pool: MemberPool, vd_size_bytes: int) -> None:
        self.shell.note(f"{self.label}: loop devices, mkfs.btrfs, mount")
        self.workdir.mkdir(parents=True, exist_ok=True)
        members = pool.members(self.name, self.member_count)
        if pool.shared:
            devices = members
        else:
            for path in members:
                device = self.shell.run(
                    ["losetup", "--find", "--show", "--direct-io=on", path]
                ).strip()
                self.loop_devices.append(device)
            devices = self.loop_devices
        self.shell.run(
            ["mkfs.btrfs", "-f", "-q", "-d", self.data_profile, "-m", "raid1", *devices]
        )
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.shell.run(["mount", "-t", "btrfs", devices[0], str(self.mountpoint)])
        self.mounted = True
        self.size_bytes = vd_size_bytes

    def connections(self) -> list[Connection]:
        return [Connection.file(str(self.file_path), self.size_bytes)]

    def server_pids(self) -> list[int]:
        return []

    def teardown(self) -> None:
        if self.mounted:
            self.shell.run(["umount", str(self.mountpoint)], check=False)
            self.mounted = False
        for device in self.loop_devices:
            self.shell.run(["losetup", "-d", device], check=False)
        self.loop_devices = []
