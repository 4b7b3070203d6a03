"""The machine and tool versions the figures were measured on."""

import os
import platform
import subprocess
from pathlib import Path


def command_output(argv: list[str]) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired) as error:
        return f"({argv[0]}: {error})"
    return (result.stdout or result.stderr).strip()


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def describe(repo: Path) -> dict:
    lscpu = command_output(["lscpu"])
    keep = ("Architecture", "CPU(s)", "Model name", "Thread(s) per core", "Core(s) per socket",
            "Socket(s)", "L2 cache", "L3 cache", "Hypervisor vendor", "Flags")
    lscpu_lines = []
    for line in lscpu.splitlines():
        name = line.split(":", 1)[0].strip()
        if name in keep:
            if name == "Flags":
                flags = line.split(":", 1)[1].split()
                wanted = [f for f in flags if f in ("avx2", "avx512f", "avx512bw", "gfni", "vaes")]
                line = f"Flags (relevant):  {' '.join(wanted)}"
            lscpu_lines.append(line.strip())
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    memory = next((line for line in meminfo if line.startswith("MemTotal")), "")
    return {
        "lscpu": lscpu_lines,
        "kernel": platform.release(),
        "uname": " ".join(platform.uname()),
        "memory": " ".join(memory.split()),
        "load_average_at_start": " ".join(f"{value:.2f}" for value in os.getloadavg()),
        "fio": first_line(command_output(["fio", "--version"])),
        "nbdkit": first_line(command_output(["nbdkit", "--version"])),
        "btrfs_progs": first_line(command_output(["mkfs.btrfs", "--version"])),
        "git_revision": first_line(command_output(["git", "-C", str(repo), "rev-parse", "HEAD"])),
        # What the binary was built from, when it was built from this work tree.
        "crates_modified_files": len(
            command_output(
                ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "--", "crates"]
            ).splitlines()
        ),
    }
