//! Real NBD clients against a Tessera virtual drive: nbdinfo, qemu-img, nbdcopy.

mod daemon;
use daemon::{Daemon, have, sh};

#[test]
fn nbdinfo_shows_the_export_and_its_block_sizes() {
    if !have("nbdinfo") {
        return;
    }
    let daemon = Daemon::start();
    let uri = daemon.group_with_vd("5", 3, 64 << 20, "info", 32 << 20);
    let info: serde_json::Value =
        serde_json::from_str(&sh("nbdinfo", &["--json", &uri])).expect("nbdinfo JSON");
    let export = &info["exports"][0];
    assert_eq!(export["export-name"], "info");
    assert_eq!(export["export-size"], 32 << 20);
    assert_eq!(export["block_size_minimum"], 512);
    assert_eq!(export["block_size_preferred"], 4096);
    assert_eq!(export["block_size_maximum"], 32 << 20);
    assert_eq!(export["can_flush"], true);
    // One writer at a time unless the drive is made multi-connection (`vd set --multi-conn`).
    assert_eq!(export["can_multi_conn"], false);
    assert_eq!(export["is_read_only"], false);
    let list = sh(
        "nbdinfo",
        &[
            "--list",
            "--json",
            &format!("nbd+unix:///?socket={}", daemon.nbd_socket().display()),
        ],
    );
    assert!(list.contains("\"info\""), "export listed: {list}");
}

#[test]
fn qemu_img_convert_and_compare_and_nbdcopy_round_trip() {
    if !have("qemu-img") || !have("nbdcopy") {
        return;
    }
    let daemon = Daemon::start();
    let uri = daemon.group_with_vd("6", 4, 64 << 20, "images", 48 << 20);
    let source = daemon.path("random.img");
    let mut data = vec![0u8; 40 << 20];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for chunk in data.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    // A hole in the middle, to exercise zero runs.
    data[8 << 20..12 << 20].fill(0);
    std::fs::write(&source, &data).unwrap();
    let source = source.display().to_string();
    sh(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", &source, &uri],
    );
    let compare = sh(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", &source, &uri],
    );
    assert!(compare.contains("identical"), "{compare}");
    let copy = daemon.path("copy.img").display().to_string();
    sh("nbdcopy", &[&uri, &copy]);
    let copied = std::fs::read(&copy).unwrap();
    assert_eq!(&copied[..data.len()], &data[..]);
    assert!(
        copied[data.len()..].iter().all(|&b| b == 0),
        "the tail beyond the image reads as zeroes"
    );
    // And back the other way through nbdcopy, shifted by a byte pattern.
    let changed: Vec<u8> = copied.iter().map(|b| b.wrapping_add(1)).collect();
    std::fs::write(&copy, &changed).unwrap();
    sh("nbdcopy", &[&copy, &uri]);
    let check = daemon.path("check.img").display().to_string();
    sh("nbdcopy", &[&uri, &check]);
    assert_eq!(std::fs::read(&check).unwrap(), changed);
}
