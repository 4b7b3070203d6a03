# Shared by the guest test scripts, sourced as /tessera/lib.sh (the runners include it with
# `--include-file scripts/vm/tests/lib.sh`). Sets $work, $nbd_socket and the API socket, and
# gives the helpers every script uses: failing with the daemon's log, step timing, starting
# the daemon, the group's state, and a RAID5 with a hot spare.

work=/tmp/tessera
mkdir -p "$work"
export TESSERA_API_SOCKET=$work/api.sock
nbd_socket=$work/nbd.sock
started=$(date +%s)

fail() {
    echo "FAILED: $*"
    echo "--- daemon log (last 40 lines)"
    tail -n 40 "$work/daemon.log" 2>/dev/null || true
    exit 1
}
step() {
    echo "step: $* (at $(($(date +%s) - started)) s)"
}

# Starts `tessera serve` over the state directory $work/NAME (default: state) and waits until
# it answers; its PID is $daemon, its log $work/daemon.log.
start_daemon() {
    tessera serve --config /dev/null --state-dir "$work/${1:-state}" --nbd-socket "$nbd_socket" \
        --parity-engine cpu >>"$work/daemon.log" 2>&1 &
    daemon=$!
    i=0
    until tessera info >/dev/null 2>&1; do
        i=$((i + 1))
        [ "$i" -lt 600 ] || fail "the daemon did not answer within 60 s"
        kill -0 "$daemon" 2>/dev/null || fail "the daemon exited"
        sleep 0.1
    done
}

# `tessera dg describe 0 --json` prints `  "state": "optimal",` for the group (two spaces).
group_state() {
    tessera dg describe 0 --json | sed -n 's/^  "state": "\(.*\)",$/\1/p'
}
expect_group_state() {
    state=$(group_state)
    case " $* " in
    *" $state "*) ;;
    *) fail "drive group 0 is '$state', expected one of: $*" ;;
    esac
}
# Follows a rebuild to its end, then checks that the group is optimal again.
wait_for_rebuild() {
    tessera dg describe 0 --wait --poll-ms 200 >/dev/null || fail "dg describe --wait"
    expect_group_state optimal
}

# RAID5 over /dev/vda../dev/vdd (64 KiB chunks), /dev/vde a hot spare, and a 384 MiB virtual
# drive NAME on it.
raid5_with_spare() {
    tessera pd add /dev/vda /dev/vdb /dev/vdc /dev/vdd >/dev/null
    tessera pd add --spare /dev/vde >/dev/null
    tessera dg create --level 5 --chunk 64K 0 1 2 3 >/dev/null
    tessera vd create 0 --size 384M --name "$1" >/dev/null
    expect_group_state optimal
    echo "group: RAID5 over vda-vdd, spare vde, optimal"
}

drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
}
# Field N of /sys/block/DEV/stat (8: ... 12 discards, 16 flushes).
block_stat() {
    awk -v field="$2" '{ print $field }' "/sys/block/$1/stat"
}

# Writes COUNT random files of 64 KiB to BLOCKS (default 16) x 64 KiB, and a small tree,
# under MOUNT/NAME, appending their checksums to SUMS (paths relative to the mount point).
write_files() {
    mount_point=$1
    name=$2
    count=$3
    sums=$4
    most_blocks=${5:-16}
    mkdir -p "$mount_point/$name/tree/a/b"
    i=0
    while [ "$i" -lt "$count" ]; do
        blocks=$((1 + ($(od -An -N2 -tu2 /dev/urandom) % most_blocks)))
        dd if=/dev/urandom of="$mount_point/$name/file$i" bs=64k count="$blocks" 2>/dev/null
        echo "small file $name $i" >"$mount_point/$name/tree/a/b/note$i"
        i=$((i + 1))
    done
    (cd "$mount_point" && find "$name" -type f | sort | xargs sha256sum) >>"$sums"
}
# Checks every file in SUMS under MOUNT, read from the device (caches dropped first).
verify_files() {
    mount_point=$1
    sums=$2
    what=$3
    drop_caches
    (cd "$mount_point" && sha256sum -c -s "$sums") || fail "files differ ($what)"
    echo "files verify: $what ($(wc -l <"$sums") files)"
}
