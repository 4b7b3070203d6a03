//! Human renderings of API objects given as literal JSON (the shapes docs/api.md shows),
//! compared with text written out by hand.

use tessera_api::{DgView, PdView, VdView};
use tessera_cli::output::{describe_dg, describe_pd, describe_vd, dg_progress_line, list_dgs};
use tessera_cli::progress::{Progress, bar_line};
use tessera_cli::style::Style;

fn degraded_group() -> DgView {
    serde_json::from_str(
        r#"{"id": 3, "name": "archive", "uuid": "u-3", "level": "raid6",
            "layout": "left-symmetric", "state": "rebuilding", "chunk_bytes": 262144,
            "size_bytes": 8589934592, "free_bytes": 1073741824, "generation": 9,
            "members": [
              {"pd": 4, "path": "/dev/nvme0n1", "role": 0, "state": "online", "data_offset_bytes": 1048576},
              {"pd": 9, "path": "/dev/nvme1n1", "role": 1, "state": "rebuilding", "data_offset_bytes": 1048576},
              {"pd": null, "path": "/dev/nvme2n1", "role": 2, "state": "missing", "data_offset_bytes": 1048576},
              {"pd": 6, "path": "nbd://jbof:10809/d3", "role": 3, "state": "online", "data_offset_bytes": 2097152}],
            "rebuild": {"pd": 9, "role": 1, "progress_percent": 12.5, "rate_percent": 30,
                        "eta_seconds": 200, "position_bytes": 1, "total_bytes": 8},
            "journal": {"mode": "always_on", "placement": "device", "pd": 12},
            "rebuild_rate_percent": 30,
            "bad_ranges": [{"offset_bytes": 65536, "len_bytes": 4096}],
            "virtual_drives": ["vd0", "backup"],
            "a_field_from_a_newer_daemon": true}"#,
    )
    .expect("the documented shape parses")
}

#[test]
fn drive_group_description() {
    let dg = degraded_group();
    assert_eq!(
        describe_dg(Style::PLAIN, &dg),
        "\
Drive group 3 (archive)
  level:           raid6 (left-symmetric)
  state:           rebuilding
  size:            8.0 GiB (8589934592 bytes), 1.0 GiB free
  chunk:           256K (262144 bytes)
  journal:         always_on, on physical drive 12
  rebuild rate:    30%
  rebuild:         rebuilding physical drive 9 (role 1): 12.5%, rate 30%, ETA 3 min 20 s
  bad ranges:      65536+4096
  virtual drives:  vd0, backup
  uuid:            u-3
  generation:      9

ROLE  PD  STATE       DATA OFFSET  PATH
   0   4  online          1.0 MiB  /dev/nvme0n1
   1   9  rebuilding      1.0 MiB  /dev/nvme1n1
   2   -  missing         1.0 MiB  /dev/nvme2n1
   3   6  online          2.0 MiB  nbd://jbof:10809/d3
"
    );
    assert_eq!(
        list_dgs(Style::PLAIN, std::slice::from_ref(&dg)),
        "\
ID  NAME     LEVEL  STATE          SIZE     FREE  CHUNK  MEMBERS  VDS  ACTIVITY
 3  archive  raid6  rebuilding  8.0 GiB  1.0 GiB   256K      2/4    2  rebuild 12.5%
"
    );
    assert_eq!(
        dg_progress_line(&dg),
        "drive group 3: rebuilding physical drive 9 (role 1): 12.5%, rate 30%, ETA 3 min 20 s"
    );
    assert_eq!(
        bar_line(&dg),
        "archive rebuild [####..........................]  12.5%  rate 30%  ETA 3 min 20 s"
    );
}

#[test]
fn coloured_states_on_a_terminal() {
    let dg = degraded_group();
    let colour = Style { colour: true };
    let text = list_dgs(colour, &[dg]);
    assert!(text.contains("\x1b[33mrebuilding\x1b[0m"), "{text:?}");
    assert!(text.starts_with("\x1b[1mID\x1b[0m"), "{text:?}");
}

#[test]
fn progress_redraws_on_a_terminal_and_prints_changes_otherwise() {
    let mut dg = degraded_group();
    let mut plain = Vec::new();
    let mut progress = Progress::new(false);
    progress.update(&mut plain, &dg).unwrap();
    progress.update(&mut plain, &dg).unwrap();
    dg.rebuild.as_mut().unwrap().progress_percent = 50.0;
    progress.update(&mut plain, &dg).unwrap();
    progress.finish(&mut plain).unwrap();
    assert_eq!(
        String::from_utf8(plain).unwrap(),
        "\
drive group 3: rebuilding physical drive 9 (role 1): 12.5%, rate 30%, ETA 3 min 20 s
drive group 3: rebuilding physical drive 9 (role 1): 50.0%, rate 30%, ETA 3 min 20 s
"
    );
    let mut terminal = Vec::new();
    let mut progress = Progress::new(true);
    progress.update(&mut terminal, &dg).unwrap();
    progress.finish(&mut terminal).unwrap();
    assert_eq!(
        String::from_utf8(terminal).unwrap(),
        "\r\x1b[2Karchive rebuild [###############...............]  50.0%  rate 30%  ETA 3 min 20 s\n"
    );
}

#[test]
fn drive_and_thin_volume_descriptions() {
    let pd: PdView = serde_json::from_str(
        r#"{"id": 7, "path": "nbd+unix:///d?socket=/s", "kind": "nbd", "uuid": "",
            "size_bytes": 1000204886016, "state": "hot_spare", "dg": null, "role": null,
            "spare_for": 2, "io": {"direct": false, "zeroing": "write_zeroes"}}"#,
    )
    .unwrap();
    assert_eq!(
        describe_pd(Style::PLAIN, &pd),
        "\
Physical drive 7
  path:         nbd+unix:///d?socket=/s
  kind:         nbd
  state:        hot_spare
  size:         931.5 GiB (1000204886016 bytes)
  drive group:  -
  spare for:    dg 2
  direct I/O:   no (page cache)
  zeroing:      NBD WRITE_ZEROES
  uuid:         -
"
    );
    let vd: VdView = serde_json::from_str(
        r#"{"name": "thin0", "dg": 1, "size_bytes": 10995116277760, "offset_bytes": 0,
            "nbd_uri": "nbd+unix:///thin0?socket=/run/tessera/nbd.sock", "connections": 2,
            "thin": true, "compression": "lz4",
            "stats": {"logical_used_bytes": 2147483648, "physical_used_bytes": 1073741824,
                      "host_bytes_written": 100, "member_bytes_written": 60,
                      "write_amplification": 0.6, "compression_ratio": 2.0,
                      "checksum_errors_detected": 1, "checksum_errors_repaired": 1,
                      "capacity_bytes": 4398046511104, "free_bytes": 3298534883328,
                      "cleaning_bytes_written": 1048576, "overcommit_ratio": 2.5,
                      "state": "serving"},
            "access": {"allow": ["uid:1000", "net:10.0.0.0/8"], "read_only": true,
                       "multi_conn": false}}"#,
    )
    .unwrap();
    assert_eq!(
        describe_vd(Style::PLAIN, &vd),
        "\
Virtual drive thin0
  NBD URI:              nbd+unix:///thin0?socket=/run/tessera/nbd.sock
  drive group:          1
  size:                 10.0 TiB (10995116277760 bytes)
  kind:                 thin (lz4)
  connections:          2
  allowed clients:      uid:1000, net:10.0.0.0/8
  access:               read-only, one writer at a time
  state:                serving
  capacity:             4.0 TiB of group space, 3.0 TiB free, overcommitted 2.50x
  logical used:         2.0 GiB
  physical used:        1.0 GiB
  cleaning written:     1.0 MiB
  compression:          2.00x
  write amplification:  0.600
  checksum errors:      1 detected, 1 repaired
"
    );
}

#[test]
fn unknown_states_from_a_newer_daemon_are_shown_not_refused() {
    let pd: PdView = serde_json::from_str(
        r#"{"id": 1, "path": "/x", "kind": "zns", "uuid": "u", "size_bytes": 0,
            "state": "sanitizing", "dg": null, "role": null, "spare_for": null}"#,
    )
    .unwrap();
    assert!(describe_pd(Style::PLAIN, &pd).contains("  state:        unknown\n"));
}

#[test]
fn a_drive_exported_over_ublk_shows_its_device() {
    let vd: VdView = serde_json::from_str(
        r#"{"name": "vd0", "dg": 0, "size_bytes": 1073741824, "offset_bytes": 0,
            "nbd_uri": "nbd+unix:///vd0?socket=/s", "connections": 0, "thin": false,
            "ublk": {"device": "/dev/ublkb3", "device_id": 3, "queues": 2, "queue_depth": 64,
                     "state": "live"}}"#,
    )
    .unwrap();
    let text = describe_vd(Style::PLAIN, &vd);
    assert!(
        text.contains(
            "\n  connections:      0\n  ublk device:      /dev/ublkb3 (live, 2 queue(s) of depth 64)\n"
        ),
        "{text}"
    );
}

#[test]
fn many_bad_ranges_are_counted_and_the_first_few_listed() {
    let mut dg = degraded_group();
    dg.bad_ranges = (0..6)
        .map(|i| tessera_api::BadRange {
            offset_bytes: i * 65536,
            len_bytes: 512,
        })
        .collect();
    let text = describe_dg(Style::PLAIN, &dg);
    assert!(
        text.contains(
            "  bad ranges:      6 ranges, 3.0 KiB in all: 0+512, 65536+512, 131072+512, \
             196608+512, ... (--json lists every range)\n"
        ),
        "{text}"
    );
}

#[test]
fn a_thick_drive_with_lost_data_says_where() {
    let vd: VdView = serde_json::from_str(
        r#"{"name": "vd0", "dg": 0, "size_bytes": 1073741824, "offset_bytes": 65536,
            "nbd_uri": "nbd+unix:///vd0?socket=/s", "connections": 0, "thin": false,
            "lost_ranges": [{"offset_bytes": 8192, "len_bytes": 512}]}"#,
    )
    .unwrap();
    let text = describe_vd(Style::PLAIN, &vd);
    assert!(text.ends_with("  lost data:        8192+512\n"), "{text}");
}
