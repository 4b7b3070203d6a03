#!/bin/sh
# Tessera's ublk front end in the test VM, run by xtask/tests/vm_ublk.rs with five virtio disks
# and the tessera binary included:
#   cargo xtask vm run --disks 5x256M --include-file scripts/vm/tests/lib.sh \
#       --include-binary target/debug/tessera scripts/vm/tests/ublk.sh
# `tessera serve` runs in the guest over /dev/vda../dev/vdd (RAID5, 64 KiB chunks) with
# /dev/vde as a hot spare; `tessera vd export --ublk` makes its virtual drive /dev/ublkb0.
#   device: size, queues, write cache and FUA as the kernel sees them; refusals (no such drive,
#           exported twice, deleted while exported);
#   raw:    fio verify (crc32c, io_uring, direct, several queues), flushes reach the server,
#           write-zeroes reads back zeroes, discard drops whole regions;
#   ext4:   files checksummed, a member fails while mounted, the hot spare is rebuilt,
#           e2fsck -fn clean, files verify;
#   xfs:    the same with the failed member brought back and rebuilt, xfs_repair -n clean;
#   thin:   a thin drive as /dev/ublkb1 (8 queues asked, one per CPU kept): fio verify,
#           discard, ext4 with files, e2fsck clean;
#   access: vd set --read-only on makes writes fail, off lets them through again;
#   end:    unexport removes /dev/ublkb0 and /dev/ublkc0; daemon shutdown removes a live device
#           and exits 0, and the next start makes it again with its data; vd delete --force
#           removes it and its record; after the daemon is killed, the next start deletes the
#           device it left behind and exports the drive again; an unexported drive stays so;
#           dg delete --force removes its drives' devices first.
# Each step prints one line the Rust test looks for; any failed check exits non-zero.
set -eu

. /tessera/lib.sh
vd=ublktest
size=$((384 << 20))

# Exports the drive and checks that the printed device is a block device.
export_drive() {
    device=$(tessera vd export "$vd" --ublk "$@") || fail "vd export --ublk $*"
    [ "$device" = /dev/ublkb0 ] || fail "vd export printed '$device', expected /dev/ublkb0"
    test -b /dev/ublkb0 || fail "no block device /dev/ublkb0 after the export"
}
wait_present() {
    i=0
    until test -b "$1"; do
        i=$((i + 1))
        [ "$i" -lt 300 ] || fail "$1 did not appear within 30 s"
        sleep 0.1
    done
}
wait_gone() {
    i=0
    while [ -e "$1" ]; do
        i=$((i + 1))
        [ "$i" -lt 100 ] || fail "$1 still exists"
        sleep 0.1
    done
}
# The block layer logs "... error, dev ublkb0, ..." for every request answered with an error.
no_request_errors() {
    if dmesg | grep 'error, dev ublkb0'; then
        fail "requests to /dev/ublkb0 failed"
    fi
}
fio_verify() {
    name=$1
    shift
    fio --name="$name" --filename="${fio_device:-/dev/ublkb0}" --ioengine=io_uring --direct=1 --verify=crc32c \
        --do_verify=1 --verify_fatal=1 --numjobs=1 --eta=never --output="$work/fio-$name.out" "$@" ||
        { tail -n 20 "$work/fio-$name.out"; fail "fio $name"; }
    grep -q 'err= 0' "$work/fio-$name.out" || fail "fio $name reported an error"
}

# --- the daemon, the group and the drive
modprobe ublk_drv
test -c /dev/ublk-control || fail "no /dev/ublk-control after modprobe ublk_drv"
start_daemon
raid5_with_spare "$vd"
step "daemon up"

# --- the device
if tessera vd export nosuch --ublk >"$work/refused.out" 2>&1; then
    fail "exporting a drive that does not exist succeeded"
fi
grep -q 'no virtual drive nosuch' "$work/refused.out" || fail "wrong refusal: $(cat "$work/refused.out")"
echo "refused: export of a missing drive"
export_drive --queues 2 --queue-depth 32
got=$(blockdev --getsize64 /dev/ublkb0)
[ "$got" -eq "$size" ] || fail "/dev/ublkb0 has $got bytes, expected $size"
queues=$(ls /sys/block/ublkb0/mq | wc -l)
[ "$queues" -eq 2 ] || fail "/dev/ublkb0 has $queues hardware queues, expected 2"
cache=$(cat /sys/block/ublkb0/queue/write_cache)
[ "$cache" = "write back" ] || fail "write cache is '$cache', expected 'write back'"
[ "$(cat /sys/block/ublkb0/queue/fua)" = 1 ] || fail "FUA is off"
tessera vd describe "$vd" --json | grep '"device": "/dev/ublkb0"' >/dev/null || fail "vd describe has no ublk device"
echo "ublkb0: $got bytes, 2 queues, write back with FUA"
if tessera vd export "$vd" --ublk >"$work/refused.out" 2>&1; then
    fail "exporting the drive twice succeeded"
fi
grep -q 'exported over ublk already' "$work/refused.out" || fail "wrong refusal: $(cat "$work/refused.out")"
echo "refused: a second export"
step "exported"

# --- raw device
fio_verify random --rw=randwrite --bsrange=4k-128k --size=48M --iodepth=16
fio_verify sequential --rw=write --bs=512k --offset=64M --size=64M --iodepth=4
echo "fio verify: random and sequential ok"
flushes=$(block_stat ublkb0 16)
fio_verify fsync --rw=randwrite --bs=4k --offset=160M --size=1M --iodepth=1 --fsync=8
[ "$(block_stat ublkb0 16)" -gt "$flushes" ] || fail "no flush reached /dev/ublkb0"
echo "flush: reaches the device"
# Write zeroes (fallocate's zero range on a block device): over random data, reads back zeroes.
[ "$(cat /sys/block/ublkb0/queue/write_zeroes_max_bytes)" -gt 0 ] || fail "no write zeroes"
dd if=/dev/urandom of=/dev/ublkb0 bs=1M seek=200 count=8 oflag=direct 2>/dev/null
xfs_io -c "fzero -k 200m 8m" /dev/ublkb0 || fail "fzero"
dd if=/dev/ublkb0 of="$work/zeroes" bs=1M skip=200 count=8 iflag=direct 2>/dev/null
cmp -n $((8 << 20)) /dev/zero "$work/zeroes" || fail "write zeroes left data behind"
echo "write zeroes: reads back zeroes"
# Discard: whole regions of the group (4 MiB) read back as zeroes.
dd if=/dev/urandom of=/dev/ublkb0 bs=1M seek=256 count=32 oflag=direct 2>/dev/null
discards=$(block_stat ublkb0 12)
blkdiscard -o $((256 << 20)) -l $((32 << 20)) /dev/ublkb0 || fail "blkdiscard"
[ "$(block_stat ublkb0 12)" -gt "$discards" ] || fail "no discard reached /dev/ublkb0"
dd if=/dev/ublkb0 of="$work/discarded" bs=1M skip=264 count=16 iflag=direct 2>/dev/null
cmp -n $((16 << 20)) /dev/zero "$work/discarded" || fail "discarded regions still hold data"
echo "discard: whole regions read back zeroes"
no_request_errors
step "raw done"

# --- ext4: a member fails while mounted, the hot spare takes over
mkdir -p /mnt/ublk
mkfs.ext4 -q /dev/ublkb0
mount -t ext4 /dev/ublkb0 /mnt/ublk
: >/tmp/sums.ext4
write_files /mnt/ublk before 10 /tmp/sums.ext4 8
sync
tessera pd fail 2 >/dev/null
expect_group_state degraded rebuilding optimal
echo "ext4: member 2 failed while mounted"
write_files /mnt/ublk during 6 /tmp/sums.ext4 8
verify_files /mnt/ublk /tmp/sums.ext4 "ext4 after the failure"
wait_for_rebuild
tessera dg describe 0 --json | grep '"pd": 4,' >/dev/null || fail "the spare (pd 4) is not a member"
echo "ext4: rebuilt onto the spare, group optimal"
umount /mnt/ublk
e2fsck -fn /dev/ublkb0 >"$work/e2fsck.out" 2>&1 || { cat "$work/e2fsck.out"; fail "e2fsck"; }
echo "e2fsck: clean"
mount -t ext4 /dev/ublkb0 /mnt/ublk
verify_files /mnt/ublk /tmp/sums.ext4 "ext4 remounted"
umount /mnt/ublk
step "ext4 done"

# --- xfs: a member fails while mounted, comes back online and is rebuilt
mkfs.xfs -q -f /dev/ublkb0
mount -t xfs /dev/ublkb0 /mnt/ublk
: >/tmp/sums.xfs
write_files /mnt/ublk before 10 /tmp/sums.xfs 8
sync
tessera pd fail 1 >/dev/null
expect_group_state degraded
echo "xfs: member 1 failed while mounted"
write_files /mnt/ublk during 6 /tmp/sums.xfs 8
verify_files /mnt/ublk /tmp/sums.xfs "xfs degraded"
tessera pd online 1 >/dev/null
wait_for_rebuild
echo "xfs: member 1 back online and rebuilt, group optimal"
umount /mnt/ublk
xfs_repair -n /dev/ublkb0 >"$work/xfs_repair.out" 2>&1 || { cat "$work/xfs_repair.out"; fail "xfs_repair"; }
echo "xfs_repair: clean"
mount -t xfs /dev/ublkb0 /mnt/ublk
verify_files /mnt/ublk /tmp/sums.xfs "xfs remounted"
umount /mnt/ublk
step "xfs done"
fio_verify rebuilt --rw=randrw --bsrange=4k-64k --size=16M --iodepth=16
no_request_errors
echo "fio verify: after the rebuilds ok"

# --- a thin drive beside it: its requests go through the drive's log-structured store
tessera vd create 0 --size 256M --thin --name thintest >/dev/null
# More queues than CPUs: the driver keeps one per CPU (the guest has 2), and so do we.
device=$(tessera vd export thintest --ublk --queues 8) || fail "vd export thintest --ublk"
[ "$device" = /dev/ublkb1 ] || fail "thin drive exported as '$device', expected /dev/ublkb1"
queues=$(ls /sys/block/ublkb1/mq | wc -l)
[ "$queues" -eq "$(nproc)" ] || fail "/dev/ublkb1 has $queues queues for $(nproc) CPUs"
tessera vd describe thintest --json | grep '"queues": '"$queues"',' >/dev/null ||
    fail "vd describe does not show the $queues queues kept"
fio_device=/dev/ublkb1 fio_verify thin --rw=randwrite --bsrange=4k-64k --size=24M --iodepth=16
dd if=/dev/urandom of=/dev/ublkb1 bs=1M seek=64 count=4 oflag=direct 2>/dev/null
blkdiscard -o $((64 << 20)) -l $((4 << 20)) /dev/ublkb1 || fail "blkdiscard on the thin drive"
dd if=/dev/ublkb1 of="$work/thin-discarded" bs=1M skip=64 count=4 iflag=direct 2>/dev/null
cmp -n $((4 << 20)) /dev/zero "$work/thin-discarded" || fail "discarded thin blocks hold data"
mkfs.ext4 -q /dev/ublkb1
mount -t ext4 /dev/ublkb1 /mnt/ublk
: >/tmp/sums.thin
write_files /mnt/ublk thin 8 /tmp/sums.thin 8
umount /mnt/ublk
e2fsck -fn /dev/ublkb1 >"$work/e2fsck-thin.out" 2>&1 || { cat "$work/e2fsck-thin.out"; fail "e2fsck thin"; }
mount -t ext4 /dev/ublkb1 /mnt/ublk
verify_files /mnt/ublk /tmp/sums.thin "thin drive"
umount /mnt/ublk
tessera vd unexport thintest --ublk >/dev/null || fail "vd unexport thintest"
wait_gone /dev/ublkb1
if dmesg | grep 'error, dev ublkb1'; then
    fail "requests to /dev/ublkb1 failed"
fi
echo "thin: $queues queues for 8 asked, fio verify, discard, ext4 and e2fsck through /dev/ublkb1"
step "thin done"

# --- read-only access: writes refused while it is set (last: the kernel logs the errors)
tessera vd set "$vd" --read-only on >/dev/null
if dd if=/dev/zero of=/dev/ublkb0 bs=4k count=1 seek=10 oflag=direct 2>/dev/null; then
    fail "a write to a read-only drive succeeded"
fi
tessera vd set "$vd" --read-only off >/dev/null
dd if=/dev/zero of=/dev/ublkb0 bs=4k count=1 seek=10 oflag=direct 2>/dev/null ||
    fail "a write after read-only was turned off failed"
echo "read-only: writes refused while set, accepted after"

# --- removal: unexport, delete while exported, daemon shutdown
tessera vd unexport "$vd" --ublk >/dev/null || fail "vd unexport"
wait_gone /dev/ublkb0
wait_gone /dev/ublkc0
if tessera vd describe "$vd" --json | grep '"ublk": {' >/dev/null; then
    fail "vd describe still shows a ublk device"
fi
echo "unexport: /dev/ublkb0 and /dev/ublkc0 removed"
export_drive
if tessera vd delete "$vd" >"$work/refused.out" 2>&1; then
    fail "deleting an exported drive without --force succeeded"
fi
grep -q 'exported over ublk' "$work/refused.out" || fail "wrong refusal: $(cat "$work/refused.out")"
echo "refused: delete of an exported drive"
dd if=/dev/urandom of=/dev/ublkb0 bs=1M seek=32 count=4 oflag=direct 2>/dev/null
before=$(dd if=/dev/ublkb0 bs=1M skip=32 count=4 iflag=direct 2>/dev/null | md5sum)
grep -q '"vd": "'"$vd"'"' "$work/state/drives.json" || fail "the export is not in the state file"
kill -TERM "$daemon"
status=0
wait "$daemon" || status=$?
[ "$status" -eq 0 ] || fail "the daemon exited with $status on SIGTERM"
wait_gone /dev/ublkb0
wait_gone /dev/ublkc0
grep -q 'all drive groups stopped cleanly' "$work/daemon.log" || fail "no clean stop in the log"
echo "shutdown: device removed, daemon exited 0"
start_daemon
wait_present /dev/ublkb0
expect_group_state optimal
after=$(dd if=/dev/ublkb0 bs=1M skip=32 count=4 iflag=direct 2>/dev/null | md5sum)
[ "$after" = "$before" ] || fail "/dev/ublkb0 holds other data after the restart"
tessera vd describe "$vd" --json | grep '"device": "/dev/ublkb0"' >/dev/null ||
    fail "vd describe has no ublk device after the restart"
echo "restart: /dev/ublkb0 exported again with its data"
tessera vd delete "$vd" --force >/dev/null || fail "vd delete --force"
wait_gone /dev/ublkb0
if tessera vd list | grep "$vd" >/dev/null; then
    fail "the drive survived vd delete --force"
fi
if grep -q '"vd": "'"$vd"'"' "$work/state/drives.json"; then
    fail "the deleted drive's export is still in the state file"
fi
echo "delete --force: device removed with the drive"
# A daemon killed outright leaves /dev/ublkc0 behind (the kernel drops the block device);
# the next export deletes it and takes its number again.
tessera vd create 0 --size 64M --name crashtest >/dev/null
[ "$(tessera vd export crashtest --ublk)" = /dev/ublkb0 ] || fail "export before the crash"
kill -KILL "$daemon"
wait "$daemon" || true
wait_gone /dev/ublkb0
test -c /dev/ublkc0 || fail "/dev/ublkc0 went away by itself"
start_daemon
wait_present /dev/ublkb0
grep 'left by a daemon that died: \[0\]' "$work/daemon.log" >/dev/null ||
    fail "the abandoned device was not deleted"
grep -q 'virtual drive crashtest exported as /dev/ublkb0' "$work/daemon.log" ||
    fail "crashtest was not exported again"
echo "crash: the abandoned device deleted, the drive exported again at start"
tessera vd unexport crashtest --ublk >/dev/null || fail "unexport after the crash"
wait_gone /dev/ublkc0
if grep -q crashtest "$work/state/drives.json"; then
    fail "the unexported drive is still in the state file"
fi
kill -TERM "$daemon"
wait "$daemon" || fail "the daemon failed to stop"
start_daemon
expect_group_state optimal
if tessera vd describe crashtest --json | grep '"ublk": {' >/dev/null || test -e /dev/ublkb0; then
    fail "an unexported drive was exported again at start"
fi
echo "unexported: not exported again at start"
[ "$(tessera vd export crashtest --ublk)" = /dev/ublkb0 ] || fail "export before dg delete"
tessera dg delete 0 --force >/dev/null || fail "dg delete --force with an exported drive"
wait_gone /dev/ublkb0
if grep -q crashtest "$work/state/drives.json"; then
    fail "the deleted group's drive is still in the state file"
fi
echo "dg delete --force: the drive's device removed first"
kill -TERM "$daemon"
wait "$daemon" || fail "the daemon failed to stop"
step "removal done"
echo "UBLK-OK"
