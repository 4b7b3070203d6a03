#!/bin/sh
# Adopting a Linux md array in place (`tessera dg import-md`), run by xtask/tests/vm_md_import.rs
# with five virtio disks and the tessera binary included:
#   cargo xtask vm run --disks 5x128M --include-file scripts/vm/tests/lib.sh \
#       --include-binary target/debug/tessera scripts/vm/tests/md_import.sh
# md RAID5 over /dev/vda../dev/vdd (metadata 1.2, 64 KiB chunks, no bitmap), ext4 with files
# and their SHA-256 recorded, md stopped; `tessera serve` adopts the array, the kernel NBD
# client attaches the virtual drive, the files verify; then a member fails, the hot spare
# /dev/vde is rebuilt, e2fsck -fn is clean and the files verify again. Then md RAID6 over all
# five disks (only 64 MiB of each, resynced by md first), adopted degraded with /dev/vdc left
# out, files verified, /dev/vdc added back as a spare and rebuilt, e2fsck clean, files verified.
# Last, md RAID1 over /dev/vda and /dev/vdb, adopted, written to under Tessera, and handed back
# to md (docs/md-import.md, "Going back to md"): md assembles it and every file verifies.
# Then md RAID0 (64 KiB chunks) and RAID10 (near 2, mdadm's default chunk and data offset)
# over four disks, each adopted with its files verified and e2fsck clean.
# Each step prints one line the Rust test looks for; any failed check exits non-zero.
set -eu

. /tessera/lib.sh

# Writes 24 random files (64 KiB to 1 MiB) and small ones under /mnt/data; records sums.
write_md_files() {
    mkdir -p /mnt/data/tree/a/b
    i=0
    while [ "$i" -lt 24 ]; do
        blocks=$((1 + ($(od -An -N2 -tu2 /dev/urandom) % 16)))
        dd if=/dev/urandom of="/mnt/data/file$i" bs=64k count="$blocks" 2>/dev/null
        echo "small file $i" >"/mnt/data/tree/a/b/note$i"
        i=$((i + 1))
    done
    (cd /mnt/data && find . -type f | sort | xargs sha256sum) >/tmp/sums
}
stop_daemon() {
    kill -TERM "$daemon"
    daemon_status=0
    wait "$daemon" || daemon_status=$?
    [ "$daemon_status" -eq 0 ] || fail "the daemon exited with $daemon_status"
}
# ext4 on /dev/MD with the checksummed files, then the array stopped.
fill_and_stop() {
    mkfs.ext4 -q -b 4096 "/dev/$1"
    mount -t ext4 "/dev/$1" /mnt/data
    write_md_files
    umount /mnt/data
    mdadm --stop "/dev/$1" >/dev/null 2>&1 || fail "mdadm --stop $1"
}
verify_md_files() {
    drop_caches
    (cd /mnt/data && sha256sum -c -s /tmp/sums) || fail "files differ ($1)"
    echo "files verify: $1 ($(wc -l </tmp/sums) files)"
}

# --- an md array with a file system and files on it, stopped cleanly
modprobe raid456
mdadm --create /dev/md0 --run --quiet --metadata=1.2 --level=5 --raid-devices=4 \
    --chunk=64 --bitmap=none --assume-clean --name=mdtest \
    /dev/vda /dev/vdb /dev/vdc /dev/vdd || fail "mdadm --create"
md_bytes=$(blockdev --getsize64 /dev/md0)
data_offset=$(mdadm --examine /dev/vda | sed -n 's/^ *Data Offset : \([0-9]*\) sectors.*/\1/p')
echo "md: RAID5 over vda-vdd, $md_bytes bytes, data at sector $data_offset"
mkdir -p /mnt/data
fill_and_stop md0
echo "md: ext4 with $(wc -l </tmp/sums) files, stopped"
step "md array ready"

# --- the daemon adopts it
modprobe nbd
start_daemon state5
# Given out of order: md's roles decide the order.
tessera dg import-md /dev/vdc /dev/vda /dev/vdd /dev/vdb >"$work/import.out" 2>&1 ||
    { cat "$work/import.out"; fail "dg import-md"; }
head -n 1 "$work/import.out"
vd_bytes=$(tessera vd describe mdtest --json | sed -n 's/^  "size_bytes": \([0-9]*\),$/\1/p')
[ "$vd_bytes" = "$md_bytes" ] || fail "virtual drive mdtest has '$vd_bytes' bytes, md had $md_bytes"
[ "$(group_state)" = optimal ] || fail "drive group 0 is '$(group_state)' after the import"
echo "import: virtual drive mdtest of $vd_bytes bytes, group optimal"
# md's superblock is kept at 36 KiB (magic a92b4efc, little-endian).
magic=$(dd if=/dev/vda bs=4096 skip=9 count=1 2>/dev/null | od -An -tx4 -N4 | tr -d ' ')
[ "$magic" = a92b4efc ] || fail "no md superblock kept at 36 KiB of /dev/vda ('$magic')"
echo "import: md superblocks kept at 36 KiB"
# md no longer sees an array there.
if mdadm --examine /dev/vda >/dev/null 2>&1; then fail "mdadm still sees a superblock"; fi
step "imported"

nbd-client -unix "$nbd_socket" -N mdtest -b 4096 /dev/nbd0 >"$work/nbd-client.log" 2>&1 ||
    { cat "$work/nbd-client.log"; fail "nbd-client could not attach"; }
mount -t ext4 /dev/nbd0 /mnt/data
verify_md_files "adopted"

# --- a member fails; the hot spare is rebuilt
tessera pd add --spare /dev/vde >/dev/null
tessera pd fail 2 >/dev/null
echo "rebuild: member 2 failed, spare vde taking over"
verify_md_files "degraded"
tessera dg describe 0 --wait --poll-ms 200 >/dev/null || fail "dg describe --wait"
[ "$(group_state)" = optimal ] || fail "drive group 0 is '$(group_state)' after the rebuild"
tessera dg describe 0 --json >"$work/dg.json"
grep -q '"pd": 4,' "$work/dg.json" || fail "the spare (pd 4) is not a member"
echo "rebuild: done, group optimal"
step "rebuilt"
umount /mnt/data
e2fsck -fn /dev/nbd0 >"$work/e2fsck.out" 2>&1 || { cat "$work/e2fsck.out"; fail "e2fsck"; }
echo "e2fsck: clean"
mount -t ext4 /dev/nbd0 /mnt/data
verify_md_files "rebuilt"
umount /mnt/data
nbd-client -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d"

stop_daemon
echo "daemon: stopped cleanly"
step "raid5 done"

# --- md RAID6, adopted degraded; the member left out comes back as a spare
for disk in vda vdb vdc vdd vde; do
    dd if=/dev/zero of=/dev/$disk bs=1M count=4 conv=fsync 2>/dev/null
done
echo 200000 >/proc/sys/dev/raid/speed_limit_min
mdadm --create /dev/md1 --run --quiet --metadata=1.2 --level=6 --raid-devices=5 \
    --chunk=64 --bitmap=none --size=64M --name=mdsix \
    /dev/vda /dev/vdb /dev/vdc /dev/vdd /dev/vde || fail "mdadm --create raid6"
mdadm --wait /dev/md1 || true
grep -q resync /proc/mdstat && fail "md is still resyncing"
md_bytes=$(blockdev --getsize64 /dev/md1)
fill_and_stop md1
echo "md6: RAID6 over vda-vde, $md_bytes bytes, resynced, ext4 with $(wc -l </tmp/sums) files, stopped"
step "raid6 array ready"
start_daemon state6
tessera dg import-md /dev/vda /dev/vdb /dev/vdd /dev/vde >"$work/import.out" 2>&1 ||
    { cat "$work/import.out"; fail "dg import-md (raid6, vdc left out)"; }
vd_bytes=$(tessera vd describe mdsix --json | sed -n 's/^  "size_bytes": \([0-9]*\),$/\1/p')
[ "$vd_bytes" = "$md_bytes" ] || fail "virtual drive mdsix has '$vd_bytes' bytes, md had $md_bytes"
[ "$(group_state)" = degraded ] || fail "drive group 0 is '$(group_state)', expected degraded"
echo "import6: virtual drive mdsix of $vd_bytes bytes, degraded (vdc left out)"
nbd-client -unix "$nbd_socket" -N mdsix -b 4096 /dev/nbd0 >"$work/nbd-client.log" 2>&1 ||
    { cat "$work/nbd-client.log"; fail "nbd-client could not attach mdsix"; }
mount -t ext4 /dev/nbd0 /mnt/data
verify_md_files "raid6 degraded"
tessera pd add --spare /dev/vdc >/dev/null
tessera dg describe 0 --wait --poll-ms 200 >/dev/null || fail "dg describe --wait"
[ "$(group_state)" = optimal ] || fail "drive group 0 is '$(group_state)' after the rebuild"
echo "rebuild6: vdc added back as a spare and rebuilt, group optimal"
umount /mnt/data
e2fsck -fn /dev/nbd0 >"$work/e2fsck.out" 2>&1 || { cat "$work/e2fsck.out"; fail "e2fsck"; }
echo "e2fsck6: clean"
mount -t ext4 /dev/nbd0 /mnt/data
verify_md_files "raid6 rebuilt"
umount /mnt/data
nbd-client -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d"
stop_daemon
step "raid6 done"

# --- md RAID1, adopted, written to under Tessera, handed back to md
for disk in vda vdb vdc vdd vde; do
    dd if=/dev/zero of=/dev/$disk bs=1M count=4 conv=fsync 2>/dev/null
done
mdadm --create /dev/md2 --run --quiet --metadata=1.2 --level=1 --raid-devices=2 \
    --bitmap=none --size=32M --name=mirror /dev/vda /dev/vdb || fail "mdadm --create raid1"
mdadm --wait /dev/md2 || true
mkfs.ext4 -q -b 4096 /dev/md2
mount -t ext4 /dev/md2 /mnt/data
echo "written under md" >/mnt/data/md-note
umount /mnt/data
mdadm --stop /dev/md2 >/dev/null 2>&1 || fail "mdadm --stop md2"
start_daemon state1
tessera dg import-md /dev/vdb /dev/vda >"$work/import.out" 2>&1 ||
    { cat "$work/import.out"; fail "dg import-md (raid1)"; }
nbd-client -unix "$nbd_socket" -N mirror -b 4096 /dev/nbd0 >"$work/nbd-client.log" 2>&1 ||
    { cat "$work/nbd-client.log"; fail "nbd-client could not attach mirror"; }
mount -t ext4 /dev/nbd0 /mnt/data
write_md_files
echo "written under md" >/tmp/md-note
cmp -s /mnt/data/md-note /tmp/md-note || fail "the file written under md differs"
umount /mnt/data
nbd-client -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d"
echo "import1: RAID1 adopted, files written under Tessera"
tessera dg delete 0 --force >/dev/null || fail "dg delete"
tessera pd remove 0 1 >/dev/null || fail "pd remove"
stop_daemon
for disk in vda vdb; do
    dd if=/dev/$disk of=/dev/$disk bs=4096 skip=9 seek=1 count=4 conv=notrunc,fsync 2>/dev/null
done
mdadm --assemble /dev/md2 /dev/vda /dev/vdb >"$work/assemble.out" 2>&1 ||
    { cat "$work/assemble.out"; fail "mdadm --assemble after going back"; }
grep -q "md2 : active raid1 vd.\[.\] vd.\[.\]" /proc/mdstat || { cat /proc/mdstat; fail "md2 not whole"; }
e2fsck -fn /dev/md2 >"$work/e2fsck.out" 2>&1 || { cat "$work/e2fsck.out"; fail "e2fsck md2"; }
mount -t ext4 /dev/md2 /mnt/data
verify_md_files "back under md"
cmp -s /mnt/data/md-note /tmp/md-note || fail "the file written under md differs after going back"
umount /mnt/data
mdadm --stop /dev/md2 >/dev/null 2>&1 || fail "mdadm --stop md2"
echo "back1: md assembles the array again, e2fsck clean, every file verifies"
# --- md RAID0 and RAID10 (near 2) over vda-vdd, adopted, files verified, e2fsck clean
# adopt_striped LEVEL NAME [MDADM OPTION...]
adopt_striped() {
    level=$1
    name=$2
    shift 2
    for disk in vda vdb vdc vdd vde; do
        dd if=/dev/zero of=/dev/$disk bs=1M count=4 conv=fsync 2>/dev/null
    done
    mdadm --create /dev/md3 --run --quiet --metadata=1.2 --level="$level" --raid-devices=4 \
        --name="$name" "$@" /dev/vda /dev/vdb /dev/vdc /dev/vdd ||
        fail "mdadm --create raid$level"
    mdadm --wait /dev/md3 || true
    md_bytes=$(blockdev --getsize64 /dev/md3)
    chunk=$(mdadm --detail /dev/md3 | sed -n 's/^ *Chunk Size : //p')
    fill_and_stop md3
    start_daemon "state$level"
    tessera dg import-md /dev/vda /dev/vdb /dev/vdc /dev/vdd >"$work/import.out" 2>&1 ||
        { cat "$work/import.out"; fail "dg import-md (raid$level)"; }
    vd_bytes=$(tessera vd describe "$name" --json | sed -n 's/^  "size_bytes": \([0-9]*\),$/\1/p')
    [ "$vd_bytes" = "$md_bytes" ] || fail "virtual drive $name has '$vd_bytes' bytes, md had $md_bytes"
    [ "$(group_state)" = optimal ] || fail "drive group 0 is '$(group_state)', expected optimal"
    nbd-client -unix "$nbd_socket" -N "$name" -b 4096 /dev/nbd0 >"$work/nbd-client.log" 2>&1 ||
        { cat "$work/nbd-client.log"; fail "nbd-client could not attach $name"; }
    mount -t ext4 /dev/nbd0 /mnt/data
    verify_md_files "raid$level adopted"
    umount /mnt/data
    e2fsck -fn /dev/nbd0 >"$work/e2fsck.out" 2>&1 || { cat "$work/e2fsck.out"; fail "e2fsck raid$level"; }
    nbd-client -d /dev/nbd0 >/dev/null 2>&1 || fail "nbd-client -d"
    stop_daemon
    echo "import$level: RAID$level over vda-vdd, chunk $chunk, $vd_bytes bytes as md had, files verify, e2fsck clean"
}
adopt_striped 0 stripes --chunk=64
# mdadm's default chunk (512 KiB) and data offset: no room for a journal, which RAID10 needs not.
adopt_striped 10 neartwo
step "raid0 and raid10 done"

step "done"
echo "MD-IMPORT-OK"
