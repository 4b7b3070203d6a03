#!/bin/sh
# Tessera under the kernel's own NBD client, run by xtask/tests/vm_nbd_client.rs with five
# virtio disks and the tessera binary included:
#   cargo xtask vm run --disks 5x256M --include-file scripts/vm/tests/lib.sh \
#       --include-binary target/debug/tessera scripts/vm/tests/nbd_client.sh
# `tessera serve` runs in the guest over /dev/vda../dev/vdd (RAID5, 64 KiB chunks) with
# /dev/vde as a hot spare; its virtual drive is attached to /dev/nbd0 by nbd-client. Then:
#   ext4: files written and checksummed, a member fails while mounted (the spare takes over and
#         is rebuilt), more files written degraded, e2fsck -fn clean, every file verifies;
#   xfs:  the same, the failed member brought back online and rebuilt, xfs_repair -n clean;
#   raw:  fio verify (crc32c, libaio, direct) healthy, degraded and after a rebuild; FLUSH
#         reaches the kernel client and the members; discard drops whole regions.
# Each step prints one line the Rust test looks for; any failed check exits non-zero.
set -eu

. /tessera/lib.sh


member_flushes() {
    total=0
    for disk in vda vdb vdc vdd vde; do
        total=$((total + $(block_stat "$disk" 16)))
    done
    echo "$total"
}


# --- the daemon and the virtual drive
modprobe nbd
test -b /dev/nbd0 || fail "no /dev/nbd0 after modprobe nbd"
start_daemon
step "daemon up"
raid5_with_spare nbdtest

nbd-client -unix "$nbd_socket" -N nbdtest -b 4096 /dev/nbd0 >"$work/nbd-client.log" 2>&1 ||
    { cat "$work/nbd-client.log"; fail "nbd-client could not attach"; }
size=$(blockdev --getsize64 /dev/nbd0)
[ "$size" -eq $((384 << 20)) ] || fail "/dev/nbd0 has $size bytes, expected $((384 << 20))"
echo "nbd0: attached, $size bytes"
step "attached"

# --- ext4: a member fails while mounted, the hot spare takes over
mkdir -p /mnt/nbd
mkfs.ext4 -q /dev/nbd0
mount -t ext4 /dev/nbd0 /mnt/nbd
: >/tmp/sums.ext4
write_files /mnt/nbd before 12 /tmp/sums.ext4
sync
tessera pd fail 2 >/dev/null
expect_group_state degraded rebuilding optimal
echo "ext4: member 2 failed while mounted"
write_files /mnt/nbd during 8 /tmp/sums.ext4
verify_files /mnt/nbd /tmp/sums.ext4 "ext4 after the failure"
wait_for_rebuild
tessera dg describe 0 --json | grep -q '"pd": 4,' || fail "the spare (pd 4) is not a member"
echo "ext4: rebuilt onto the spare, group optimal"
umount /mnt/nbd
e2fsck -fn /dev/nbd0 >"$work/e2fsck.out" 2>&1 || { cat "$work/e2fsck.out"; fail "e2fsck"; }
echo "e2fsck: clean"
mount -t ext4 /dev/nbd0 /mnt/nbd
verify_files /mnt/nbd /tmp/sums.ext4 "ext4 remounted"
umount /mnt/nbd
step "ext4 done"

# --- xfs: a member fails while mounted, comes back online and is rebuilt
mkfs.xfs -q -f /dev/nbd0
mount -t xfs /dev/nbd0 /mnt/nbd
: >/tmp/sums.xfs
write_files /mnt/nbd before 12 /tmp/sums.xfs
sync
tessera pd fail 1 >/dev/null
expect_group_state degraded
echo "xfs: member 1 failed while mounted"
write_files /mnt/nbd during 8 /tmp/sums.xfs
verify_files /mnt/nbd /tmp/sums.xfs "xfs degraded"
tessera pd online 1 >/dev/null
wait_for_rebuild
echo "xfs: member 1 back online and rebuilt, group optimal"
umount /mnt/nbd
xfs_repair -n /dev/nbd0 >"$work/xfs_repair.out" 2>&1 ||
    { cat "$work/xfs_repair.out"; fail "xfs_repair -n"; }
echo "xfs_repair: clean"
mount -t xfs /dev/nbd0 /mnt/nbd
verify_files /mnt/nbd /tmp/sums.xfs "xfs remounted"
umount /mnt/nbd
step "xfs done"

# --- raw device: fio verify healthy, degraded, rebuilt
fio_job="--name=raw --filename=/dev/nbd0 --ioengine=libaio --direct=1 --size=32M
    --rw=randwrite --bsrange=4k-64k --iodepth=16 --verify=crc32c --verify_fatal=1
    --verify_state_save=0 --randseed=7 --output-format=terse --terse-version=3"
# shellcheck disable=SC2086
fio $fio_job --do_verify=1 >"$work/fio.out" 2>&1 || { cat "$work/fio.out"; fail "fio write+verify"; }
echo "fio verify: healthy"
tessera pd fail 0 >/dev/null
expect_group_state degraded
# shellcheck disable=SC2086
fio $fio_job --verify_only >"$work/fio.out" 2>&1 || { cat "$work/fio.out"; fail "fio verify degraded"; }
echo "fio verify: degraded"
tessera pd online 0 >/dev/null
wait_for_rebuild
# shellcheck disable=SC2086
fio $fio_job --verify_only >"$work/fio.out" 2>&1 || { cat "$work/fio.out"; fail "fio verify rebuilt"; }
echo "fio verify: rebuilt"
step "fio done"

# --- FLUSH: the kernel client sends it (write-back cache) and the daemon flushes the members
[ "$(cat /sys/block/nbd0/queue/write_cache)" = "write back" ] ||
    fail "nbd0 write_cache is '$(cat /sys/block/nbd0/queue/write_cache)': no FLUSH offered"
flushes=$(block_stat nbd0 16)
members=$(member_flushes)
dd if=/dev/urandom of=/dev/nbd0 bs=64k count=16 seek=1024 conv=fsync 2>/dev/null ||
    fail "write with fsync on /dev/nbd0"
sync
[ "$(block_stat nbd0 16)" -gt "$flushes" ] || fail "no FLUSH went through /dev/nbd0"
[ "$(member_flushes)" -gt "$members" ] || fail "a FLUSH through nbd0 flushed no member"
echo "flush: through nbd0 ($((flushes)) -> $(block_stat nbd0 16)) and to the members"

# --- discard: whole regions inside the range read as zeroes, data around it is kept
[ "$(cat /sys/block/nbd0/queue/discard_max_bytes)" -gt 0 ] || fail "nbd0 offers no discard"
dd if=/dev/urandom of=/dev/nbd0 bs=1M count=48 conv=fsync 2>/dev/null
drop_caches
head_sum=$(dd if=/dev/nbd0 bs=1M count=8 2>/dev/null | sha256sum)
tail_sum=$(dd if=/dev/nbd0 bs=1M skip=40 count=8 2>/dev/null | sha256sum)
discards=$(block_stat nbd0 12)
blkdiscard -o $((8 << 20)) -l $((32 << 20)) /dev/nbd0 || fail "blkdiscard"
[ "$(block_stat nbd0 12)" -gt "$discards" ] || fail "no discard went through /dev/nbd0"
drop_caches
zero_sum=$(dd if=/dev/zero bs=1M count=16 2>/dev/null | sha256sum)
[ "$(dd if=/dev/nbd0 bs=1M skip=16 count=16 2>/dev/null | sha256sum)" = "$zero_sum" ] ||
    fail "the middle of the discarded range does not read as zeroes"
[ "$(dd if=/dev/nbd0 bs=1M count=8 2>/dev/null | sha256sum)" = "$head_sum" ] ||
    fail "data before the discarded range changed"
[ "$(dd if=/dev/nbd0 bs=1M skip=40 count=8 2>/dev/null | sha256sum)" = "$tail_sum" ] ||
    fail "data after the discarded range changed"
echo "discard: range reads as zeroes, data around it kept"

# --- detach and stop the daemon cleanly
nbd-client -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d"
kill -TERM "$daemon"
daemon_status=0
wait "$daemon" || daemon_status=$?
[ "$daemon_status" -eq 0 ] || fail "the daemon exited with status $daemon_status"
echo "daemon: stopped cleanly"
step "done"
echo "NBD-CLIENT-OK"
