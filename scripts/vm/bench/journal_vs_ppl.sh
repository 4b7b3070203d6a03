#!/bin/sh
# What closing the RAID5 write hole costs: Linux md's partial parity log against Tessera's
# journal, on the same virtio disks in one run of the test VM (docs/benchmarks.md, "The write
# journal's cost"). Not a test: run it by hand,
#   cargo build --release -p tessera-cli
#   cargo xtask vm run --disks 5x256M --timeout 1200 --include-file scripts/vm/tests/lib.sh \
#       --include-binary target/release/tessera scripts/vm/bench/journal_vs_ppl.sh [ROUNDS]
# RAID5 4+1 over /dev/vda../dev/vde, 64 KiB chunks, each system twice: md with
# `--consistency-policy=resync` (no log) and `=ppl`; Tessera (ublk) with `--journal
# always_off` and `always_on`. 4 KiB random writes (fio libaio, direct, 1 s ramp, 4 s) at QD1
# and QD32 over the first 512 MiB, written once beforehand so every update reads data.
# ROUNDS (default 2) repeats the four configurations in turn. Output: one `result` line per
# point, then per system and depth `cost` = log on / log off, the mean over the rounds.
set -eu
. /tessera/lib.sh
rounds=${1:-2}
results=$work/results
: >"$results"
members="/dev/vda /dev/vdb /dev/vdc /dev/vdd /dev/vde"

wipe() {
    for disk in $members; do
        blkdiscard -f "$disk" 2>/dev/null || dd if=/dev/zero of="$disk" bs=1M count=4 2>/dev/null
    done
}

# point SYSTEM MODE DEVICE: the two depths on DEVICE.
point() {
    fio --name=fill --filename="$3" --rw=write --bs=1M --iodepth=8 --ioengine=libaio --direct=1 \
        --size=512M >/dev/null
    for depth in 1 32; do
        iops=$(fio --name=w --filename="$3" --rw=randwrite --bs=4k --iodepth="$depth" \
            --ioengine=libaio --direct=1 --size=512M --ramp_time=1 --runtime=4 --time_based \
            --randrepeat=0 --output-format=terse | awk -F';' '{ print $49 }')
        echo "result $1 $2 qd$depth $iops" | tee -a "$results"
    done
}

md() { # POLICY
    wipe
    mdadm --create /dev/md0 --run --level=5 --raid-devices=5 --chunk=64 --assume-clean \
        --consistency-policy="$1" $members >"$work/mdadm.out" 2>&1 ||
        fail "mdadm --create ($1): $(cat "$work/mdadm.out")"
    point md "$1" /dev/md0
    mdadm --stop /dev/md0 >/dev/null 2>&1
    for disk in $members; do mdadm --zero-superblock "$disk"; done
}

tessera_point() { # MODE
    wipe
    start_daemon "state-$1-$round"
    tessera pd add $members >/dev/null
    tessera dg create --level 5 --chunk 64K --journal "$1" 0 1 2 3 4 >/dev/null
    tessera vd create 0 --size 600M --name j >/dev/null
    device=$(tessera vd export j --ublk)
    point tessera "$1" "$device"
    tessera vd unexport j --ublk >/dev/null
    kill -TERM "$daemon"
    wait "$daemon" || true
}

modprobe raid456
modprobe ublk_drv
round=1
while [ "$round" -le "$rounds" ]; do
    md resync
    md ppl
    tessera_point always_off
    tessera_point always_on
    round=$((round + 1))
done

mean() { # SYSTEM MODE DEPTH
    awk -v s="$1" -v m="$2" -v d="$3" '$2 == s && $3 == m && $4 == d { t += $5; n++ }
        END { if (n) printf "%.0f", t / n; else print 0 }' "$results"
}
for depth in qd1 qd32; do
    for pair in "md resync ppl" "tessera always_off always_on"; do
        set -- $pair
        off=$(mean "$1" "$2" "$depth")
        on=$(mean "$1" "$3" "$depth")
        awk -v s="$1" -v d="$depth" -v a="$off" -v b="$on" \
            'BEGIN { printf "cost %s %s: %d IOPS off, %d on, %.2fx\n", s, d, a, b, (a ? b / a : 0) }'
    done
done
