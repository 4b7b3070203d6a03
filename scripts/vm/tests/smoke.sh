#!/bin/sh
# Smoke test of the test VM, run by xtask/tests/vm_smoke.rs with four virtio disks:
#   cargo xtask vm run --disks 4x512M [--include-binary PATH] scripts/vm/tests/smoke.sh [PROGRAM]...
# Checks that the kernel has md RAID5, nbd and ublk, that the Debian tools run with their
# libraries, and that a file survives ext4 on md RAID5. Each PROGRAM (an included host binary)
# is run once with no arguments, to show that host binaries and their libraries work.
set -eu

echo "kernel: $(uname -r)"
modprobe raid456
modprobe nbd
modprobe ublk_drv
test -c /dev/ublk-control
echo "ublk-control: present"
test -b /dev/nbd0
echo "nbd0: present"

mdadm --version 2>&1 | head -n 1
fio --version
mkfs.xfs -V
for program in "$@"; do
    echo "host binary $program says: $("$program" 2>&1 | head -n 1)"
done

mdadm --create /dev/md0 --run --level=5 --raid-devices=4 --chunk=64 --assume-clean \
    /dev/vda /dev/vdb /dev/vdc /dev/vdd 2>&1
grep '^md0' /proc/mdstat

# A short fio verify pass straight on the array, before the file system covers it.
fio --name=verify --filename=/dev/md0 --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
    --size=4M --iodepth=8 --verify=crc32c --output-format=terse --terse-version=3 >/tmp/fio.out
echo "fio verify: ok"

mkfs.ext4 -q /dev/md0
mkdir -p /mnt/md
mount -t ext4 /dev/md0 /mnt/md
dd if=/dev/urandom of=/tmp/reference bs=1M count=8 2>/dev/null
cp /tmp/reference /mnt/md/file
umount /mnt/md
mount -t ext4 /dev/md0 /mnt/md
cmp /tmp/reference /mnt/md/file
echo "file: identical after remount"
umount /mnt/md
e2fsck -fn /dev/md0 >/tmp/fsck.out 2>&1
echo "e2fsck: clean"
mdadm --stop /dev/md0 2>&1
echo "SMOKE-OK"
