#!/bin/sh
# Where a ublk request's time goes under the test VM's emulation (docs/benchmarks.md, "Linux md
# side by side"). Not a test: run it by hand,
#   cargo build --release -p tessera-cli
#   cargo xtask vm run --disks 5x256M --include-file scripts/vm/tests/lib.sh \
#       --include-binary target/release/tessera scripts/vm/bench/ublk_latency.sh
# 4 KiB random reads at queue depth 1 (fio, libaio, direct, 3 s each) on: a bare virtio disk;
# Tessera's RAID5 over /dev/vda../dev/vdd exported as /dev/ublkb0 (one queue), as it runs, then
# with every daemon thread pinned to CPU 0 and fio to CPU 1, then all on CPU 0; the CPU time
# of each daemon thread over the default run; and md's RAID5 over the same disks.
# Prints one `latency ...` line per point.
set -eu
. /tessera/lib.sh
modprobe ublk_drv
modprobe raid456
point() { # NAME FILE [FIO ARGS...]
    name=$1
    file=$2
    shift 2
    fio --name="$name" --filename="$file" --rw=randread --bs=4k --iodepth=1 --ioengine=libaio \
        --direct=1 --runtime=3 --time_based --size=100M --norandommap --output-format=terse \
        "$@" >"$work/fio.out" 2>&1 || { cat "$work/fio.out"; fail "fio $name"; }
    awk -F';' -v n="$name" '{ printf "latency %s: %d IOPS, mean completion %.0f us\n", n, $8, $16 }' "$work/fio.out"
}
# Per-thread user and system CPU ticks of the daemon (HZ 100).
thread_ticks() {
    for task in /proc/"$daemon"/task/*; do
        printf '%s %s\n' "$(cat "$task/comm")" "$(sed 's/^.*) //' "$task/stat" | awk '{ print $12 + $13 }')"
    done | sort
}
pin_daemon() {
    for task in /proc/"$daemon"/task/*; do
        taskset -p "$1" "$(basename "$task")" >/dev/null
    done
}

point bare-disk /dev/vda
start_daemon
raid5_with_spare t
device=$(tessera vd export t --ublk --queues 1)
dd if=/dev/zero of="$device" bs=1M count=100 oflag=direct 2>/dev/null
thread_ticks >"$work/ticks.before"
point ublk "$device"
thread_ticks >"$work/ticks.after"
awk 'NR == FNR { before[$1] += $2; next } { after[$1] += $2 }
    END { for (t in after) if (after[t] > before[t])
        printf "latency thread %s: %d ms of CPU over the ublk run\n", t, (after[t] - before[t]) * 10 }' \
    "$work/ticks.before" "$work/ticks.after"
pin_daemon 1
point ublk-daemon-cpu0-fio-cpu1 "$device" --cpus_allowed=1
point ublk-all-cpu0 "$device" --cpus_allowed=0
tessera vd unexport t --ublk >/dev/null
kill -TERM "$daemon"
wait "$daemon" || true
for disk in a b c d; do blkdiscard /dev/vd$disk 2>/dev/null || true; done
mdadm --create /dev/md0 --run --level=5 --raid-devices=4 --chunk=64 --assume-clean \
    /dev/vda /dev/vdb /dev/vdc /dev/vdd >/dev/null 2>&1
dd if=/dev/zero of=/dev/md0 bs=1M count=100 oflag=direct 2>/dev/null
point md /dev/md0
mdadm --stop /dev/md0 >/dev/null 2>&1 || true
echo "LATENCY-DONE"
