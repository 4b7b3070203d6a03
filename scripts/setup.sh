#!/usr/bin/env bash
# Installs what Tessera's build, tests, demo and benchmarks need on Debian/Ubuntu, and checks
# the Rust toolchain. Safe to run again: it installs only what is missing.
set -euo pipefail

packages=(
  # building: ISA-L (the parity benchmark's reference) is built from source with these
  build-essential nasm autoconf automake libtool pkg-config
  # NBD clients and tools the tests drive
  fio nbdkit libnbd-bin qemu-utils
  # block devices and filesystems in the end-to-end tests
  fuse3 e2fsprogs btrfs-progs util-linux
  # the GPU parity engine's tests run on Mesa's software Vulkan
  mesa-vulkan-drivers
  # the test VM (ublk, the kernel NBD client, Linux md) boots under QEMU
  qemu-system-x86
  # the benchmark suite's runner and its plots
  python3 python3-venv
  # the web dashboard's end-to-end test renders it in headless Chromium
  chromium
  # the packaging tests: manual pages checked by man and groff, the systemd unit by
  # systemd-analyze, the .deb built and listed by dpkg-deb (binutils, from build-essential,
  # strips it)
  man-db groff-base systemd dpkg
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]})); then
  echo "tessera setup: installing Debian packages: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    sudo=sudo
    command -v sudo >/dev/null || { echo "tessera setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  else
    sudo=
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "tessera setup: Debian packages present"
fi

if ! command -v cargo >/dev/null; then
  echo "tessera setup: Rust is not installed; install rustup (https://rustup.rs) and run this again" >&2
  exit 1
fi
# rust-toolchain.toml pins the version; rustup fetches it on first use.
(cd "$(dirname "$0")/.." && cargo --version >/dev/null)
echo "tessera setup: $(cd "$(dirname "$0")/.." && rustc --version)"
