"""Member devices for the targets: sparse files on tmpfs (the default: the software path is
measured, not this machine's disk), or real block devices given with --devices.

With files every target gets its own set, so all targets live side by side and their runs can
be interleaved. Block devices are shared: each target takes the first N of them in turn, and
they are wiped of old signatures before each target is set up."""

from pathlib import Path

from .shell import Shell

# Bytes wiped at both ends of a block device before a target uses it: Tessera's superblocks
# and btrfs's signatures live within the first and last few MiB.
WIPE_BYTES = 16 << 20


class MemberPool:
    def __init__(
        self,
        shell: Shell,
        workdir: Path,
        member_size_bytes: int,
        devices: list[str] | None = None,
    ):
        self.shell = shell
        self.workdir = workdir
        self.devices = devices
        if devices:
            sizes = [self.device_size_bytes(device) for device in devices]
            self.member_size_bytes = min(sizes)
        else:
            self.member_size_bytes = member_size_bytes

    @property
    def shared(self) -> bool:
        """True when targets share the members and so must run one after another."""
        return bool(self.devices)

    def device_size_bytes(self, device: str) -> int:
        return int(self.shell.run(["blockdev", "--getsize64", device]).strip())

    def members(self, owner: str, count: int) -> list[str]:
        """`count` member paths for the target named `owner`."""
        if self.devices:
            if count > len(self.devices):
                raise ValueError(f"{owner} needs {count} devices, --devices gave {len(self.devices)}")
            chosen = self.devices[:count]
            for device in chosen:
                self.wipe(device)
            return chosen
        directory = self.workdir / owner
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for index in range(count):
            path = directory / f"member{index}.img"
            self.shell.run(["truncate", "-s", str(self.member_size_bytes), str(path)])
            paths.append(str(path))
        return paths

    def wipe(self, device: str) -> None:
        self.shell.run(["wipefs", "-a", "-q", device], check=False)
        size_bytes = self.device_size_bytes(device)
        for offset_bytes in (0, max(0, size_bytes - WIPE_BYTES)):
            self.shell.run(
                [
                    "dd",
                    "if=/dev/zero",
                    f"of={device}",
                    "bs=1M",
                    f"count={WIPE_BYTES >> 20}",
                    f"seek={offset_bytes >> 20}",
                    "oflag=direct",
                    "status=none",
                ]
            )
