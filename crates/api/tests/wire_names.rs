//! The wire names of every object are the ones docs/api.md documents: each object, serialized,
//! has exactly the documented keys (listed here by hand from the document).

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Value, json};
use tessera_api::{
    CreateDg, CreatePd, CreateVd, DgView, EventView, InfoView, JournalMode, PdView, RaidLevel,
    ScrubDg, UpdateDg, VdView,
};

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .expect("an object")
        .keys()
        .cloned()
        .collect()
}

fn documented(names: &str) -> BTreeSet<String> {
    names.split_whitespace().map(str::to_string).collect()
}

/// Parses `value` as `T`, serializes it back, and checks the keys.
fn round_trip<T: serde::de::DeserializeOwned + Serialize>(value: Value, names: &str) -> Value {
    let parsed: T = serde_json::from_value(value).expect("the documented shape parses");
    let back = serde_json::to_value(&parsed).unwrap();
    assert_eq!(keys(&back), documented(names));
    back
}

#[test]
fn objects_have_the_documented_keys() {
    let pd = round_trip::<PdView>(
        json!({"id": 0, "path": "/dev/nvme0n1", "kind": "block", "uuid": "u", "size_bytes": 1,
               "state": "hot_spare", "dg": null, "role": null, "spare_for": 2,
               "io": {"direct": true, "zeroing": "zero_range"}}),
        "id path kind uuid size_bytes state dg role spare_for io",
    );
    assert_eq!(keys(&pd["io"]), documented("direct zeroing"));
    assert_eq!(pd["io"]["zeroing"], "zero_range");
    let dg = round_trip::<DgView>(
        json!({"id": 0, "name": "dg0", "uuid": "u", "level": "raid5", "layout": "left-symmetric",
               "state": "optimal", "chunk_bytes": 65536, "size_bytes": 0, "free_bytes": 0,
               "generation": 7,
               "members": [{"pd": 0, "path": "/p", "role": 0, "state": "online",
                            "data_offset_bytes": 1048576}],
               "rebuild": {"pd": 3, "role": 1, "kind": "copy", "progress_percent": 12.5,
                           "rate_percent": 30, "eta_seconds": 40, "position_bytes": 0,
                           "total_bytes": 0},
               "scrub": {"repair": false, "progress_percent": 50.0, "rate_percent": 30,
                         "eta_seconds": null, "position_bytes": 0, "total_bytes": 0,
                         "mismatches": 0, "repaired": 0},
               "last_scrub": {"repair": true, "finished_unix_ms": 0, "completed": true,
                              "mismatches": 0, "repaired": 0, "unrecoverable": 0},
               "journal": {"mode": "degrade_only", "placement": "members", "pd": null},
               "rebuild_rate_percent": 30, "scrub_rate_percent": 30,
               "bad_ranges": [{"offset_bytes": 0, "len_bytes": 4096}],
               "virtual_drives": ["vd0"]}),
        "id name uuid level layout state chunk_bytes size_bytes free_bytes generation members \
         rebuild scrub last_scrub journal rebuild_rate_percent scrub_rate_percent bad_ranges \
         virtual_drives",
    );
    assert_eq!(
        keys(&dg["members"][0]),
        documented("pd path role state data_offset_bytes")
    );
    assert_eq!(
        keys(&dg["rebuild"]),
        documented(
            "pd role kind progress_percent rate_percent eta_seconds position_bytes total_bytes"
        )
    );
    assert_eq!(
        keys(&dg["scrub"]),
        documented(
            "repair progress_percent rate_percent eta_seconds position_bytes total_bytes mismatches repaired"
        )
    );
    assert_eq!(
        keys(&dg["last_scrub"]),
        documented("repair finished_unix_ms completed mismatches repaired unrecoverable")
    );
    assert_eq!(
        keys(&dg["journal"]),
        documented("mode placement pd active covering area_bytes")
    );
    assert_eq!(
        keys(&dg["bad_ranges"][0]),
        documented("offset_bytes len_bytes")
    );

    // Fields a daemon of this version may leave out: a minimal group still parses.
    let minimal: DgView = serde_json::from_value(json!({
        "id": 1, "name": "g", "uuid": "", "level": 6, "layout": "left-symmetric",
        "state": "degraded", "chunk_bytes": 4096, "size_bytes": 0, "free_bytes": 0,
        "generation": 1, "members": [], "rebuild": null,
        "journal": {"mode": "always_off", "placement": "members"},
        "rebuild_rate_percent": 30, "bad_ranges": [], "virtual_drives": []}))
    .unwrap();
    assert_eq!(minimal.level, RaidLevel::Raid6);
    assert!(minimal.scrub.is_none() && minimal.last_scrub.is_none());

    let vd = round_trip::<VdView>(
        json!({"name": "vd0", "dg": 0, "size_bytes": 0, "offset_bytes": 0,
               "nbd_uri": "nbd+unix:///vd0?socket=/run/tessera/nbd.sock", "connections": 0,
               "thin": true, "compression": "zstd",
               "stats": {"logical_used_bytes": 0, "physical_used_bytes": 0,
                         "host_bytes_written": 0, "member_bytes_written": 0,
                         "write_amplification": 0.5, "compression_ratio": 2.0,
                         "checksum_errors_detected": 0, "checksum_errors_repaired": 0},
               "access": {"allow": ["uid:0"], "read_only": false, "multi_conn": true},
               "ublk": {"device": "/dev/ublkb0", "device_id": 0, "queues": 2,
                        "queue_depth": 64, "state": "live"},
               "lost_ranges": [{"offset_bytes": 4096, "len_bytes": 512}]}),
        "name dg size_bytes offset_bytes nbd_uri connections thin compression stats access ublk \
         lost_ranges",
    );
    assert_eq!(
        keys(&vd["ublk"]),
        documented("device device_id queues queue_depth state")
    );
    assert_eq!(
        keys(&vd["stats"]),
        documented(
            "logical_used_bytes physical_used_bytes host_bytes_written member_bytes_written \
             write_amplification compression_ratio checksum_errors_detected checksum_errors_repaired \
             capacity_bytes free_bytes cleaning_bytes_written overcommit_ratio state \
             map_memory_bytes"
        )
    );

    round_trip::<EventView>(
        json!({"seq": 12, "time_unix_ms": 1700000000000u64, "severity": "warning",
               "kind": "member_failed", "message": "m", "dg": 0, "pd": 3, "vd": null}),
        "seq time_unix_ms severity kind message dg pd vd",
    );

    let info = round_trip::<InfoView>(
        json!({"version": "0.1.0", "parity_engine": "auto", "uptime_seconds": 42,
               "parity": {"source": "measured",
                          "choices": [{"operation": "pq_gen", "kernel": "gfni",
                                       "streaming_kernel": "gfni-nt",
                                       "speeds": [{"kernel": "avx2", "gbps": 20.1}]}]},
               "parity_engines": [{"name": "gpu0", "kind": "gpu", "adapter": "llvmpipe",
                                   "submit_latency_us": 33.0,
                                   "calibration": [{"batch_bytes": 1048576, "gbps": 1.9}],
                                   "min_batch_bytes": null, "failure": null,
                                   "batches": 3, "computed_bytes": 3145728}],
               "parity_offload": true,
               "io": {"driver": "io_uring", "io_uring": true, "reason": null},
               "nbd_socket": "/run/tessera/nbd.sock", "nbd_listen": null}),
        "version parity_engine uptime_seconds parity parity_engines parity_offload io nbd_socket nbd_listen",
    );
    assert_eq!(
        keys(&info["parity_engines"][0]),
        documented(
            "name kind adapter submit_latency_us calibration min_batch_bytes failure batches computed_bytes"
        )
    );
    assert_eq!(
        keys(&info["parity"]["choices"][0]),
        documented("operation kernel streaming_kernel speeds")
    );
    assert_eq!(keys(&info["io"]), documented("driver io_uring reason"));
}

#[test]
fn request_bodies_take_the_documented_forms() {
    let create: CreateDg =
        serde_json::from_value(json!({"level": 5, "chunk_bytes": 65536, "pds": [0, 1, 2],
                                      "name": null, "journal": "degrade_only"}))
        .unwrap();
    assert_eq!(create.level, RaidLevel::Raid5);
    assert_eq!(create.journal, Some(JournalMode::DegradeOnly));
    assert_eq!(create.journal_pd, None);
    let minimal: CreateDg =
        serde_json::from_value(json!({"level": "raid10", "pds": [0, 1]})).unwrap();
    assert_eq!(
        (minimal.level, minimal.chunk_bytes),
        (RaidLevel::Raid10, None)
    );

    let pd: CreatePd = serde_json::from_value(json!({"path": "/x"})).unwrap();
    assert!(!pd.spare && pd.spare_for.is_none());
    let vd: CreateVd =
        serde_json::from_value(json!({"dg": 0, "name": "vd0", "size_bytes": 1073741824})).unwrap();
    assert!(!vd.thin && vd.compression.is_none());
    let unnamed: CreateVd = serde_json::from_value(json!({"dg": 0, "size_bytes": 512})).unwrap();
    assert_eq!(unnamed.name, None);

    let update: UpdateDg =
        serde_json::from_value(json!({"rebuild_rate_percent": 50, "journal": "always_on"}))
            .unwrap();
    assert_eq!(update.rebuild_rate_percent, Some(50));
    // Absent settings are not sent at all, so the daemon cannot mistake them for nulls.
    assert_eq!(
        serde_json::to_value(UpdateDg {
            scrub_rate_percent: Some(9),
            ..UpdateDg::default()
        })
        .unwrap(),
        json!({"scrub_rate_percent": 9})
    );
    assert!(serde_json::from_value::<UpdateDg>(json!({"rebuild_rate": 50})).is_err());
    assert!(serde_json::from_value::<ScrubDg>(json!({"repair": true, "fast": true})).is_err());
    assert!(
        serde_json::from_value::<CreateDg>(json!({"level": 5, "pds": [0], "chunk": 4096})).is_err()
    );
}
