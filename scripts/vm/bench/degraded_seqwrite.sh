#!/bin/sh
# How a degraded group's sequential writes go out with the journal on (docs/benchmarks.md,
# "ublk served from the data plane's ring"). Not a test: run it by hand,
#   cargo build --release -p tessera-cli
#   cargo xtask vm run --disks 5x256M --include-file scripts/vm/tests/lib.sh \
#       --include-binary target/release/tessera scripts/vm/bench/degraded_seqwrite.sh
# RAID5 4+1 over /dev/vda../dev/vde, one drive exported through ublk; 128 KiB sequential writes
# (fio libaio, direct, 5 s) at QD32 optimal, then with member 1 failed at QD32 and QD1 (the
# journal on, `degrade_only`), then at QD32 with the journal off. After each point, the
# engine's write counters from /metrics: how many writes went out as full stripes.
set -eu
. /tessera/lib.sh
modprobe ublk_drv
work=/tmp/degraded-seqwrite
mkdir -p "$work"
tessera serve --config /dev/null --state-dir "$work/state" --nbd-socket "$work/nbd.sock" \
    --parity-engine cpu --http-listen 127.0.0.1:9100 >>"$work/daemon.log" 2>&1 &
daemon=$!
i=0
until tessera info >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 600 ] || fail "the daemon did not answer within 60 s"
    sleep 0.1
done
tessera pd add /dev/vda /dev/vdb /dev/vdc /dev/vdd /dev/vde >/dev/null
tessera dg create --level 5 --chunk 64K 0 1 2 3 4 >/dev/null
tessera vd create 0 --size 900M --name t >/dev/null
device=$(tessera vd export t --ublk)
counters() {
    wget -q -O - http://127.0.0.1:9100/metrics |
        grep -E '^tessera_dg_(host_writes|full_stripe_writes|read_modify_writes|reconstruct_writes|journal_entries|journal_bytes)_total' |
        sed 's/{[^}]*}//' | tr '\n' ' '
    echo
}
point() { # NAME QD
    fio --name=s --filename="$device" --rw=write --bs=128k --iodepth="$2" --ioengine=libaio \
        --direct=1 --runtime=5 --time_based --size=800M --output-format=terse |
        awk -F';' -v n="$1" '{ printf "seqwrite %s: %d KiB/s\n", n, $48 }'
    echo "counters after $1: $(counters)"
}
point optimal-qd32 32
tessera pd fail 1 >/dev/null
point degraded-qd32 32
point degraded-qd1 1
tessera dg set 0 --journal always_off >/dev/null
point degraded-journal-off-qd32 32
tessera vd unexport t --ublk >/dev/null
kill -TERM "$daemon"
wait "$daemon" || true
