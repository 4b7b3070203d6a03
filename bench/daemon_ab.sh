#!/usr/bin/env bash
# Compares daemon builds on one small RAID5 workload: for each build in turn (alternating,
# ROUNDS times), a daemon over five 512 MiB tmpfs member files, RAID5 4+1 with 64 KiB chunks
# (RAID6 4+2 over six with -l 6), a 1 GiB virtual drive filled once, then fio over NBD for
# 5 s. Prints IOPS and the daemon's CPU time per I/O (utime + stime from /proc/PID/stat), the
# figure that says what a change to the data path costs or saves on a machine whose speed
# drifts. -j sets the group's journal mode (default: the daemon's, degrade_only). -n skips the
# fill, so fio meets a never-written drive (each region zeroed on its first write), and prints
# the bytes the group wrote to and zeroed on its members.
#
#   bench/daemon_ab.sh [-r ROUNDS] [-w RW] [-b BS] [-q QD] [-l 5|6] [-j MODE] [-n] BINARY...
#   bench/daemon_ab.sh -w randwrite /tmp/tessera-old target/release/tessera
#   bench/daemon_ab.sh -l 6 -j always_on -q 1 /tmp/tessera-old target/release/tessera
#
# Needs fio with its nbd engine (./scripts/setup.sh installs it). Uses /dev/shm/daemon-ab.
set -euo pipefail
rounds=3 rw=randwrite bs=4k qd=32 level=5 journal=() fill=1
while getopts "r:w:b:q:l:j:n" opt; do
    case $opt in
        r) rounds=$OPTARG ;;
        w) rw=$OPTARG ;;
        b) bs=$OPTARG ;;
        q) qd=$OPTARG ;;
        l) level=$OPTARG ;;
        j) journal=(--journal "$OPTARG") ;;
        n) fill=0 ;;
        *) sed -n '2,14p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,14p' "$0"; exit 2; }
case $level in
    5) members=5 ;;
    6) members=6 ;;
    *) echo "-l takes 5 or 6" >&2; exit 2 ;;
esac
last=$((members - 1))
work=/dev/shm/daemon-ab
ticks=$(getconf CLK_TCK)

run_one() {
    local bin=$1 pid t0 t1
    rm -rf "$work" && mkdir -p "$work"
    "$bin" serve --state-dir "$work/state" --api-socket "$work/api.sock" \
        --nbd-socket "$work/nbd.sock" --parity-engine cpu --busy-poll-us 0 >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do [ -S "$work/api.sock" ] && break; sleep 0.1; done
    local cli=("$bin" --api-socket "$work/api.sock")
    local paths=()
    for i in $(seq 0 "$last"); do paths+=("$work/m$i.img"); done
    truncate -s 512M "${paths[@]}"
    "${cli[@]}" pd add "${paths[@]}" >/dev/null
    "${cli[@]}" dg create --level "$level" --chunk 64K "${journal[@]}" $(seq 0 "$last") >/dev/null
    "${cli[@]}" vd create 0 --size 1G --name ab >/dev/null
    local uri="nbd+unix:///ab?socket=$work/nbd.sock"
    if [ "$fill" = 1 ]; then
        fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=1G \
            >/dev/null 2>&1
        sleep 1
    fi
    t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    fio --name=ab --ioengine=nbd --uri="$uri" --rw="$rw" --bs="$bs" --iodepth="$qd" \
        --size=1G --time_based --runtime=5 --norandommap --output-format=json \
        >"$work/fio.json" 2>"$work/fio.err" || { cat "$work/fio.err" "$work/log" >&2; exit 1; }
    t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    local member_bytes=""
    if [ "$fill" = 0 ]; then
        member_bytes=$(python3 - "$work/api.sock" <<'PY'
import socket, sys
client = socket.socket(socket.AF_UNIX)
client.connect(sys.argv[1])
client.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
text = b"".join(iter(lambda: client.recv(65536), b"")).decode()
for kind in ("write", "zeroed"):
    series = f'tessera_dg_member_{kind}_bytes_total{{dg="0"}} '
    # Builds before the zeroed counter existed counted zeroes as written.
    value = next((line[len(series):] for line in text.splitlines() if line.startswith(series)), "0")
    print(f"{kind} {float(value) / 2**20:.0f} MiB", end=" ")
PY
)
    fi
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    python3 - "$work/fio.json" "$t0" "$t1" "$ticks" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
ios = job["read"]["total_ios"] + job["write"]["total_ios"]
iops = job["read"]["iops"] + job["write"]["iops"]
cpu_s = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
print(f"{iops:9.0f} IOPS {cpu_s * 1e6 / ios:6.2f} us of daemon CPU per I/O", end=" ")
PY
    echo "$member_bytes"
    rm -rf "$work"
}

echo "RAID$level ${journal[*]} $rw $bs QD$qd, $rounds rounds, $(date -u +%FT%TZ)"
for round in $(seq "$rounds"); do
    for bin in "$@"; do
        printf 'round %d %-40s ' "$round" "$bin"
        run_one "$bin"
    done
done
