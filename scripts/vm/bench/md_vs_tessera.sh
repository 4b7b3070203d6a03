#!/bin/sh
# Linux md against Tessera on the same virtio disks, in one run of the test VM (docs/vm.md,
# docs/benchmarks.md "Linux md side by side"). Not a test: run it by hand,
#   cargo build --release -p tessera-cli
#   cargo xtask vm run --disks 7x256M --timeout 3600 --include-binary target/release/tessera \
#       scripts/vm/bench/md_vs_tessera.sh [OPTIONS]
# Disks: /dev/vda../dev/vdf are the members (RAID5 4+1 on vda-vde, RAID6 4+2 on vda-vdf),
# /dev/vdg the replacement for rebuilds. For each level, md first (mdadm --create
# --assume-clean, 64 KiB chunks), then Tessera (the same chunk size) for each front end, on
# the same disks, wiped in between (blkdiscard). For each system:
#   - the whole block device is written once (so reads hit data and a rebuild copies it all);
#   - fio (libaio, direct) four corners at QD1 and QD32: 4k randread, 4k randwrite,
#     4k randrw 70/30, 128k seqread, 128k seqwrite; optimal, then with member 1 failed;
#   - the time to rebuild onto vdg, idle; then, with a 4k randrw 70/30 QD32 load running, the
#     time to rebuild another failed member onto the (wiped) first one, up to a time limit
#     past which the progress so far gives an estimate.
# Both systems keep their default rebuild settings (md: speed_limit_min/max; Tessera: rate 30%).
# Output: one `result ...` line per figure, then one `ratio ...` line per figure (Tessera / md;
# for rebuild times md / Tessera, so above 1 is Tessera ahead everywhere).
#
# Options:
#   --frontends LIST   Tessera front ends, comma-separated: nbd (the kernel NBD client on
#                      /dev/nbd0), ublk (`tessera vd export NAME --ublk`, /dev/ublkbN); default nbd
#   --levels LIST      RAID levels, comma-separated, of 5 and 6; default 5,6
#   --runtime SECONDS  measured seconds per fio point (after a 1 s ramp); default 4
#   --load-limit SECONDS  longest wait for a rebuild under load; default 90
set -eu

frontends=nbd
levels=5,6
runtime=4
load_limit=90
while [ $# -gt 0 ]; do
    case $1 in
    --frontends) frontends=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --load-limit) load_limit=$2; shift 2 ;;
    *) echo "md_vs_tessera: unknown argument $1" >&2; exit 2 ;;
    esac
done
frontends=$(echo "$frontends" | tr ',' ' ')
levels=$(echo "$levels" | tr ',' ' ')
for frontend in $frontends; do
    case $frontend in nbd | ublk) ;; *) echo "md_vs_tessera: unknown front end $frontend" >&2; exit 2 ;; esac
done
for level in $levels; do
    case $level in 5 | 6) ;; *) echo "md_vs_tessera: level $level: 5 or 6" >&2; exit 2 ;; esac
done

chunk_kib=64
spare=/dev/vdg
work=/tmp/bench
mkdir -p "$work"
results=$work/results
: >"$results"
export TESSERA_API_SOCKET=$work/api.sock
daemon=

# Prints to standard error, so that the message shows from inside $(...) too.
fail() {
    echo "md_vs_tessera: FAILED: $*" >&2
    if [ -f "$work/daemon.log" ]; then
        echo "--- daemon log (last 30 lines)" >&2
        tail -n 30 "$work/daemon.log" >&2
    fi
    exit 1
}
for disk in vda vdb vdc vdd vde vdf vdg; do
    test -b "/dev/$disk" || fail "/dev/$disk is missing: run with --disks 7xSIZE"
done
now() { cut -d' ' -f1 /proc/uptime; }
elapsed() { awk -v start="$1" -v end="$(now)" 'BEGIN { printf "%.2f", end - start }'; }
# result SYSTEM LEVEL STATE WORKLOAD QD VALUE UNIT
record() {
    echo "result $*"
    echo "$*" >>"$results"
}
members_of() {
    if [ "$1" = 5 ]; then echo /dev/vda /dev/vdb /dev/vdc /dev/vdd /dev/vde; else
        echo /dev/vda /dev/vdb /dev/vdc /dev/vdd /dev/vde /dev/vdf; fi
}
wipe_disks() {
    for disk in /dev/vda /dev/vdb /dev/vdc /dev/vdd /dev/vde /dev/vdf /dev/vdg; do
        blkdiscard "$disk" || fail "blkdiscard $disk"
    done
}

# fio_point DEVICE RW BS QD -> "IOPS MiB/s" (reads and writes together)
fio_point() {
    out=$(fio --name=point --filename="$1" --ioengine=libaio --direct=1 --rw="$2" --bs="$3" \
        --iodepth="$4" --rwmixread=70 --time_based --runtime="$runtime" --ramp_time=1 \
        --norandommap --randrepeat=0 --output-format=terse --terse-version=3 2>&1) ||
        fail "fio $2 $3 QD$4 on $1: $out"
    echo "$out" | awk -F';' '$1 == 3 { printf "%.0f %.1f\n", $8 + $49, ($7 + $48) / 1024 }'
}
corners() {
    system=$1 level=$2 state=$3 device=$4
    for qd in 1 32; do
        for point in randread:4k randwrite:4k randrw:4k read:128k write:128k; do
            rw=${point%:*} bs=${point#*:}
            figures=$(fio_point "$device" "$rw" "$bs" "$qd")
            set -- $figures
            case $rw in
            read) record "$system raid$level $state seqread-128k qd$qd $2 MiB/s" ;;
            write) record "$system raid$level $state seqwrite-128k qd$qd $2 MiB/s" ;;
            randrw) record "$system raid$level $state randrw70-4k qd$qd $1 IOPS" ;;
            *) record "$system raid$level $state $rw-4k qd$qd $1 IOPS" ;;
            esac
        done
    done
}
fill() {
    started=$(now)
    out=$(fio --name=fill --filename="$1" --ioengine=libaio --direct=1 --rw=write --bs=1M \
        --iodepth=8 --output-format=terse --terse-version=3 2>&1) || fail "fill $1: $out"
    echo "filled $1 ($(blockdev --getsize64 "$1") bytes) in $(elapsed "$started") s"
}
# The host load during a rebuild: 4k randrw 70/30 QD32, until stopped with SIGINT.
start_load() {
    fio --name=load --filename="$1" --ioengine=libaio --direct=1 --rw=randrw --rwmixread=70 \
        --bs=4k --iodepth=32 --time_based --runtime=3600 --norandommap --randrepeat=0 \
        --output-format=terse --terse-version=3 >"$work/load.out" 2>&1 &
    load=$!
    sleep 2
}
# Stops the load and sets load_iops to what it did while it ran.
stop_load() {
    kill -INT "$load" 2>/dev/null || true
    wait "$load" || true
    load_iops=$(awk -F';' '$1 == 3 { printf "%.0f", $8 + $49 }' "$work/load.out")
    [ -n "$load_iops" ] || fail "the load's fio printed no figures: $(cat "$work/load.out")"
}
# record_rebuild SYSTEM LEVEL KIND SECONDS FINISHED PROGRESS_PERCENT [HOST_IOPS]
record_rebuild() {
    if [ "$5" = yes ]; then
        record "$1 raid$2 rebuild $3 - $4 s"
    else
        estimate=$(awk -v t="$4" -v p="$6" 'BEGIN { if (p > 0) printf "%.1f", t * 100 / p; else print "inf" }')
        echo "  ($1 raid$2: rebuild $3 not finished after $4 s, $6% done; estimate from the rate so far)"
        record "$1 raid$2 rebuild $3 - $estimate s"
    fi
    if [ $# -ge 7 ]; then record "$1 raid$2 rebuild-host-load $3 - $7 IOPS"; fi
}

# --- md
md_wait_rebuild() {
    limit=$1
    started=$(now)
    while [ "$(cat /sys/block/md0/md/degraded)" != 0 ]; do
        if [ "$(awk -v t="$(elapsed "$started")" -v l="$limit" 'BEGIN { print (t >= l) }')" = 1 ]; then
            return 1
        fi
        sleep 0.2
    done
}
md_progress() {
    awk '{ if ($3 > 0) printf "%.1f", $1 * 100 / $3; else print 0 }' /sys/block/md0/md/sync_completed 2>/dev/null || echo 0
}
bench_md() {
    level=$1
    set -- $(members_of "$level")
    count=$#
    mdadm --create /dev/md0 --run --level="$level" --raid-devices="$count" --chunk="$chunk_kib" \
        --assume-clean "$@" >"$work/mdadm.out" 2>&1 || fail "mdadm --create: $(cat "$work/mdadm.out")"
    grep '^md0' /proc/mdstat
    echo "md stripe_cache_size $(cat /sys/block/md0/md/stripe_cache_size)," \
        "speed_limit_min $(cat /proc/sys/dev/raid/speed_limit_min)," \
        "speed_limit_max $(cat /proc/sys/dev/raid/speed_limit_max) KB/s"
    fill /dev/md0
    corners md "$level" optimal /dev/md0
    mdadm /dev/md0 --fail /dev/vdb >/dev/null 2>&1 || fail "mdadm --fail"
    corners md "$level" degraded /dev/md0

    mdadm /dev/md0 --remove /dev/vdb >/dev/null 2>&1 || fail "mdadm --remove"
    started=$(now)
    mdadm /dev/md0 --add "$spare" >/dev/null 2>&1 || fail "mdadm --add $spare"
    md_wait_rebuild 100000
    record_rebuild md "$level" idle "$(elapsed "$started")" yes 100

    mdadm --zero-superblock /dev/vdb
    start_load /dev/md0
    mdadm /dev/md0 --fail /dev/vdc >/dev/null 2>&1 || fail "mdadm --fail /dev/vdc"
    mdadm /dev/md0 --remove /dev/vdc >/dev/null 2>&1 || fail "mdadm --remove /dev/vdc"
    started=$(now)
    mdadm /dev/md0 --add /dev/vdb >/dev/null 2>&1 || fail "mdadm --add /dev/vdb"
    if md_wait_rebuild "$load_limit"; then finished=yes; else finished=no; fi
    took=$(elapsed "$started")
    progress=$(md_progress)
    stop_load
    record_rebuild md "$level" load "$took" "$finished" "$progress" "$load_iops"
    mdadm --stop /dev/md0 >/dev/null 2>&1 || fail "mdadm --stop"
    for disk in /dev/vda /dev/vdb /dev/vdc /dev/vdd /dev/vde /dev/vdf /dev/vdg; do
        mdadm --zero-superblock "$disk" >/dev/null 2>&1 || true
    done
}

# --- Tessera
start_daemon() {
    rm -rf "$work/state"
    tessera serve --config /dev/null --state-dir "$work/state" --nbd-socket "$work/nbd.sock" \
        --parity-engine cpu >"$work/daemon.log" 2>&1 &
    daemon=$!
    i=0
    until tessera info >/dev/null 2>&1; do
        i=$((i + 1))
        [ "$i" -lt 600 ] || fail "the daemon did not answer within 60 s"
        kill -0 "$daemon" 2>/dev/null || fail "the daemon exited"
        sleep 0.1
    done
}
stop_daemon() {
    kill -TERM "$daemon"
    wait "$daemon" || fail "the daemon exited with status $?"
    daemon=
}
# attach FRONTEND: prints the block device of virtual drive "bench".
attach() {
    case $1 in
    nbd)
        nbd-client -unix "$work/nbd.sock" -N bench -b 4096 /dev/nbd0 >"$work/attach.out" 2>&1 ||
            fail "nbd-client: $(cat "$work/attach.out")"
        echo /dev/nbd0
        ;;
    ublk)
        tessera vd export --help 2>&1 | grep -q -- '--ublk' ||
            fail "this tessera has no ublk front end (no --ublk in tessera vd export --help)"
        tessera vd export bench --ublk >"$work/attach.out" 2>&1 ||
            fail "tessera vd export bench --ublk: $(cat "$work/attach.out")"
        device=$(grep -o '/dev/ublkb[0-9]*' "$work/attach.out" | head -n 1)
        [ -n "$device" ] || device=$(ls /dev/ublkb* 2>/dev/null | head -n 1)
        i=0
        while [ -z "$device" ] || [ ! -b "$device" ]; do
            i=$((i + 1))
            [ "$i" -lt 100 ] || fail "no /dev/ublkbN after tessera vd export --ublk"
            sleep 0.1
            [ -n "$device" ] || device=$(ls /dev/ublkb* 2>/dev/null | head -n 1)
        done
        echo "$device"
        ;;
    esac
}
detach() {
    case $1 in
    nbd) nbd-client -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d" ;;
    ublk) tessera vd unexport bench --ublk >/dev/null 2>&1 || fail "tessera vd unexport bench --ublk" ;;
    esac
}
group_field() {
    tessera dg describe 0 --json | sed -n "s/^  \"$1\": \"*\([^\",]*\)\"*,*\$/\1/p" | head -n 1
}
tessera_progress() {
    tessera dg describe 0 --json | sed -n 's/^ *"progress_percent": \([0-9.]*\),*$/\1/p' | head -n 1
}
tessera_wait_rebuild() {
    if [ "$1" = 0 ]; then
        tessera dg describe 0 --wait --poll-ms 200 >/dev/null || fail "dg describe --wait"
    else
        # In a subshell, so that the shell's "Terminated" when the time runs out goes nowhere.
        (timeout "$1" tessera dg describe 0 --wait --poll-ms 200) >/dev/null 2>&1 || true
    fi
    [ "$(group_field state)" = optimal ]
}
bench_tessera() {
    level=$1 frontend=$2
    system=tessera-$frontend
    start_daemon
    set -- $(members_of "$level")
    count=$#
    tessera pd add "$@" >/dev/null
    roles=$(seq -s ' ' 0 $((count - 1)))
    # shellcheck disable=SC2086
    tessera dg create --level "$level" --chunk "${chunk_kib}K" $roles >/dev/null
    free=$(group_field free_bytes)
    tessera vd create 0 --size "$free" --name bench >/dev/null
    echo "tessera: $(tessera info | head -n 4 | tr -s ' ' | tr '\n' ';')"
    echo "tessera: group $(group_field state), chunk $(group_field chunk_bytes) bytes," \
        "journal $(tessera dg describe 0 --json | sed -n 's/^ *"mode": "\(.*\)",*$/\1/p' | head -n 1)," \
        "rebuild rate $(group_field rebuild_rate_percent)%"
    device=$(attach "$frontend")
    fill "$device"
    corners "$system" "$level" optimal "$device"
    tessera pd fail 1 >/dev/null
    [ "$(group_field state)" = degraded ] || fail "group not degraded after pd fail 1"
    corners "$system" "$level" degraded "$device"

    started=$(now)
    tessera pd add --spare "$spare" >/dev/null
    tessera_wait_rebuild 0 || fail "the idle rebuild did not leave the group optimal"
    record_rebuild "$system" "$level" idle "$(elapsed "$started")" yes 100

    tessera pd remove 1 >/dev/null || fail "pd remove 1"
    blkdiscard /dev/vdb
    start_load "$device"
    tessera pd fail 2 >/dev/null
    started=$(now)
    tessera pd add --spare /dev/vdb >/dev/null
    if tessera_wait_rebuild "$load_limit"; then finished=yes; progress=100; else
        finished=no
        progress=$(tessera_progress)
    fi
    took=$(elapsed "$started")
    stop_load
    record_rebuild "$system" "$level" load "$took" "$finished" "${progress:-0}" "$load_iops"
    detach "$frontend"
    stop_daemon
}

# --- the run
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1))," \
    "kernel $(uname -r), $(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo) MiB"
echo "disks: 7 x $(blockdev --getsize64 /dev/vda) bytes; chunk ${chunk_kib} KiB;" \
    "fio runtime ${runtime} s + 1 s ramp; load-rebuild limit ${load_limit} s"
# Kernel messages (md's "Disk failure on ...") would interleave with the figures.
dmesg -n 1
modprobe raid456
modprobe nbd
case " $frontends " in *" ublk "*) modprobe ublk_drv ;; esac
echo "$(tessera --version)"
run_started=$(now)
for level in $levels; do
    wipe_disks
    echo "== md RAID$level"
    bench_md "$level"
    for frontend in $frontends; do
        wipe_disks
        echo "== Tessera RAID$level, $frontend front end"
        bench_tessera "$level" "$frontend"
    done
done
echo "== ratios (Tessera / md; rebuild: md time / Tessera time)"
awk '
    { key = $2 " " $3 " " $4 " " $5; value[$1 " " key] = $6; unit[key] = $7
      if ($1 != "md") { ours_systems[$1] = 1 }
      if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
    END {
        for (sys in ours_systems) for (i = 1; i <= n; i++) {
            key = order[i]; md = value["md " key]; ours = value[sys " " key]
            if (md == "" || ours == "") continue
            if (unit[key] == "s") ratio = (ours > 0) ? md / ours : 0
            else ratio = (md > 0) ? ours / md : 0
            printf "ratio %s/md %s: tessera %s md %s %s -> %.2f\n", sys, key, ours, md, unit[key], ratio
        }
    }' "$results"
echo "total: $(elapsed "$run_started") s"
echo "BENCH-DONE"
