//! Every endpoint through the client, the server and the fake controller, compared with values
//! worked out by hand from the fake's documented rules (1 GiB drives, 1 MiB data offset).

mod common;

use common::FakeDaemon;
use tessera_api::testing::{FAKE_DATA_OFFSET_BYTES, FAKE_PD_BYTES};
use tessera_api::{
    ClientError, CreateDg, CreatePd, CreateVd, DgRef, DgState, ErrorCode, JournalMode,
    JournalPlacement, PdKind, PdState, RaidLevel, RebuildKind, ReplacePd, ScrubDg, Severity,
    UpdateDg,
};

fn add(client: &tessera_api::Client, path: &str) -> u32 {
    client
        .create_pd(&CreatePd {
            path: path.to_string(),
            ..CreatePd::default()
        })
        .expect("drive added")
        .id
}

fn api_code(result: Result<impl std::fmt::Debug, ClientError>) -> ErrorCode {
    match result {
        Err(ClientError::Api(error)) => error.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[test]
fn physical_drive_endpoints() {
    let daemon = FakeDaemon::start();
    let client = daemon.client();
    assert!(client.list_pds().unwrap().is_empty());

    let first = client
        .create_pd(&CreatePd {
            path: "/dev/nvme0n1".to_string(),
            spare: false,
            spare_for: None,
        })
        .unwrap();
    assert_eq!(first.id, 0);
    assert_eq!(first.kind, PdKind::Block);
    assert_eq!(first.state, PdState::Unconfigured);
    assert_eq!(first.size_bytes, 1 << 30);
    assert_eq!((first.dg, first.role, first.spare_for), (None, None, None));

    let spare = client
        .create_pd(&CreatePd {
            path: "nbd://host:10809/disk".to_string(),
            spare: true,
            spare_for: None,
        })
        .unwrap();
    assert_eq!(
        (spare.id, spare.kind, spare.state),
        (1, PdKind::Nbd, PdState::HotSpare)
    );

    assert_eq!(client.get_pd(1).unwrap(), spare);
    let listed = client.list_pds().unwrap();
    assert_eq!(listed, vec![first.clone(), spare.clone()]);

    assert_eq!(api_code(client.get_pd(7)), ErrorCode::NotFound);
    let duplicate = client.create_pd(&CreatePd {
        path: "/dev/nvme0n1".to_string(),
        ..CreatePd::default()
    });
    assert_eq!(api_code(duplicate), ErrorCode::Conflict);

    client.delete_pd(1).unwrap();
    assert_eq!(api_code(client.get_pd(1)), ErrorCode::NotFound);
    assert_eq!(api_code(client.delete_pd(1)), ErrorCode::NotFound);
}

#[test]
fn drive_group_lifecycle_endpoints() {
    let daemon = FakeDaemon::start();
    let client = daemon.client();
    let pds: Vec<u32> = (0..4)
        .map(|i| add(&client, &format!("/tmp/pd{i}")))
        .collect();
    let spare = add(&client, "/tmp/spare");

    let dg = client
        .create_dg(&CreateDg {
            level: RaidLevel::Raid5,
            chunk_bytes: Some(128 << 10),
            pds: pds[..3].to_vec(),
            name: Some("fast".to_string()),
            journal: Some(JournalMode::AlwaysOn),
            journal_pd: None,
        })
        .unwrap();
    let member_data = (FAKE_PD_BYTES - FAKE_DATA_OFFSET_BYTES) / (128 << 10) * (128 << 10);
    assert_eq!(dg.id, 0);
    assert_eq!(dg.name, "fast");
    assert_eq!(dg.level, RaidLevel::Raid5);
    assert_eq!(dg.layout, "left-symmetric");
    assert_eq!(dg.state, DgState::Optimal);
    assert_eq!(dg.chunk_bytes, 131_072);
    assert_eq!(dg.size_bytes, 2 * member_data);
    assert_eq!(dg.free_bytes, dg.size_bytes);
    assert_eq!(dg.journal.mode, JournalMode::AlwaysOn);
    assert_eq!(dg.journal.placement, JournalPlacement::Members);
    let roles: Vec<(Option<u32>, u32, u64)> = dg
        .members
        .iter()
        .map(|m| (m.pd, m.role, m.data_offset_bytes))
        .collect();
    assert_eq!(
        roles,
        vec![
            (Some(0), 0, 1 << 20),
            (Some(1), 1, 1 << 20),
            (Some(2), 2, 1 << 20)
        ]
    );
    assert_eq!(client.get_pd(1).unwrap().dg, Some(0));
    assert_eq!(client.get_pd(1).unwrap().role, Some(1));

    // By name and by id.
    assert_eq!(client.get_dg(&DgRef::Name("fast".into())).unwrap().id, 0);
    assert_eq!(client.get_dg(&DgRef::Id(0)).unwrap().name, "fast");
    assert_eq!(client.list_dgs().unwrap().len(), 1);
    assert_eq!(api_code(client.get_dg(&DgRef::Id(9))), ErrorCode::NotFound);
    assert_eq!(api_code(client.delete_pd(0)), ErrorCode::Conflict);

    let updated = client
        .update_dg(
            &DgRef::Id(0),
            &UpdateDg {
                rebuild_rate_percent: Some(55),
                journal: Some(JournalMode::DegradeOnly),
                ..UpdateDg::default()
            },
        )
        .unwrap();
    assert_eq!(updated.rebuild_rate_percent, 55);
    assert_eq!(updated.journal.mode, JournalMode::DegradeOnly);
    let bad_rate = client.update_dg(
        &DgRef::Id(0),
        &UpdateDg {
            rebuild_rate_percent: Some(0),
            ..UpdateDg::default()
        },
    );
    assert_eq!(api_code(bad_rate), ErrorCode::InvalidArgument);

    // Scrub: each read of the group advances it by a quarter.
    let scrubbing = client
        .scrub_dg(&DgRef::Name("fast".into()), &ScrubDg { repair: true })
        .unwrap();
    assert!(scrubbing.scrub.as_ref().unwrap().repair);
    let scrub_again = client.scrub_dg(&DgRef::Id(0), &ScrubDg::default());
    assert_eq!(api_code(scrub_again), ErrorCode::Conflict);
    let mut reads = 0;
    while client.get_dg(&DgRef::Id(0)).unwrap().scrub.is_some() {
        reads += 1;
    }
    assert_eq!(reads, 3);
    let last = client.get_dg(&DgRef::Id(0)).unwrap().last_scrub.unwrap();
    assert!(last.repair && last.completed);

    // Fail a member: degraded; replace it with the spare: rebuilding, then optimal.
    let failed = client.fail_pd(1).unwrap();
    assert_eq!(failed.state, PdState::Failed);
    assert_eq!(api_code(client.fail_pd(1)), ErrorCode::Conflict);
    let degraded = client.get_dg(&DgRef::Id(0)).unwrap();
    assert_eq!(degraded.state, DgState::Degraded);
    assert_eq!(degraded.members[1].state, PdState::Failed);

    let rebuilding = client.replace_pd(1, &ReplacePd { new_pd: spare }).unwrap();
    assert_eq!(rebuilding.state, DgState::Rebuilding);
    let rebuild = rebuilding.rebuild.unwrap();
    assert_eq!(
        (rebuild.pd, rebuild.role, rebuild.kind),
        (spare, 1, RebuildKind::Rebuild)
    );
    assert_eq!(rebuild.rate_percent, 55);
    assert_eq!(rebuilding.members[1].pd, Some(spare));
    let mut progress = Vec::new();
    loop {
        let dg = client.get_dg(&DgRef::Id(0)).unwrap();
        match dg.rebuild {
            Some(rebuild) => progress.push(rebuild.progress_percent),
            None => {
                assert_eq!(dg.state, DgState::Optimal);
                break;
            }
        }
    }
    assert_eq!(progress, vec![25.0, 50.0, 75.0]);
    assert_eq!(client.get_pd(spare).unwrap().state, PdState::Online);
    assert_eq!(client.get_pd(1).unwrap().state, PdState::Unconfigured);

    // Administrative fail and online of a member: rebuilt in place.
    client.fail_pd(2).unwrap();
    let back = client.online_pd(2).unwrap();
    assert_eq!(back.state, PdState::Rebuilding);
    assert_eq!(api_code(client.online_pd(3)), ErrorCode::Conflict);

    // Delete refused while a virtual drive exists, unless forced.
    client
        .create_vd(&CreateVd {
            dg: 0,
            name: Some("vd0".to_string()),
            size_bytes: 1 << 20,
            thin: false,
            compression: None,
            ..CreateVd::default()
        })
        .unwrap();
    assert_eq!(
        api_code(client.delete_dg(&DgRef::Id(0), false)),
        ErrorCode::Conflict
    );
    client.delete_dg(&DgRef::Name("fast".into()), true).unwrap();
    assert!(client.list_dgs().unwrap().is_empty());
    assert!(client.list_vds().unwrap().is_empty());
    assert_eq!(client.get_pd(0).unwrap().state, PdState::Unconfigured);
}

#[test]
fn create_dg_refusals() {
    let daemon = FakeDaemon::start();
    let client = daemon.client();
    let pds: Vec<u32> = (0..4)
        .map(|i| add(&client, &format!("/tmp/pd{i}")))
        .collect();
    let create = |level, pds: Vec<u32>, chunk| {
        client.create_dg(&CreateDg {
            level,
            chunk_bytes: chunk,
            pds,
            name: None,
            journal: None,
            journal_pd: None,
        })
    };
    assert_eq!(
        api_code(create(RaidLevel::Raid6, pds[..3].to_vec(), None)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        api_code(create(RaidLevel::Raid5, vec![0, 0, 1], None)),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        api_code(create(RaidLevel::Raid5, pds.clone(), Some(3000))),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        api_code(create(RaidLevel::Raid5, vec![0, 1, 9], None)),
        ErrorCode::NotFound
    );
    // A failed request changes nothing: every drive is still unconfigured.
    for pd in client.list_pds().unwrap() {
        assert_eq!(pd.state, PdState::Unconfigured);
    }
    let raid10 = create(RaidLevel::Raid10, pds.clone(), None).unwrap();
    assert_eq!(raid10.name, "dg0");
    assert_eq!(raid10.layout, "near-2");
    assert_eq!(
        raid10.size_bytes,
        2 * ((FAKE_PD_BYTES - FAKE_DATA_OFFSET_BYTES) / 65536 * 65536)
    );
}

#[test]
fn virtual_drive_endpoints() {
    let daemon = FakeDaemon::start();
    let client = daemon.client();
    let pds: Vec<u32> = (0..2)
        .map(|i| add(&client, &format!("/tmp/pd{i}")))
        .collect();
    client
        .create_dg(&CreateDg {
            level: RaidLevel::Raid1,
            chunk_bytes: None,
            pds,
            name: None,
            journal: None,
            journal_pd: None,
        })
        .unwrap();
    let vd = |name: Option<&str>, size_bytes| CreateVd {
        dg: 0,
        name: name.map(str::to_string),
        size_bytes,
        thin: false,
        compression: None,
        ..CreateVd::default()
    };
    let first = client.create_vd(&vd(Some("data"), 256 << 20)).unwrap();
    assert_eq!(first.name, "data");
    assert_eq!(
        (first.dg, first.size_bytes, first.offset_bytes),
        (0, 256 << 20, 0)
    );
    assert_eq!(
        first.nbd_uri,
        "nbd+unix:///data?socket=/run/tessera/nbd.sock"
    );
    let second = client.create_vd(&vd(None, 4096)).unwrap();
    assert_eq!(second.name, "vd0");
    assert_eq!(second.offset_bytes, 256 << 20);

    assert_eq!(
        api_code(client.create_vd(&vd(Some("data"), 4096))),
        ErrorCode::Conflict
    );
    assert_eq!(
        api_code(client.create_vd(&vd(Some("x"), 1000))),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        api_code(client.create_vd(&vd(Some("x"), 1 << 40))),
        ErrorCode::Conflict
    );
    assert_eq!(
        api_code(client.create_vd(&vd(Some("9"), 4096))),
        ErrorCode::InvalidArgument
    );

    assert_eq!(client.get_vd("data").unwrap(), first);
    let names: Vec<String> = client
        .list_vds()
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, vec!["data", "vd0"]);
    assert_eq!(
        client.get_dg(&DgRef::Id(0)).unwrap().virtual_drives,
        vec!["data", "vd0"]
    );

    daemon.controller.set_connections("data", 2);
    assert_eq!(
        api_code(client.delete_vd("data", false)),
        ErrorCode::Conflict
    );
    client.delete_vd("data", true).unwrap();
    assert_eq!(api_code(client.get_vd("data")), ErrorCode::NotFound);
    // A name that cannot exist is refused before the controller is asked.
    assert_eq!(api_code(client.get_vd("a b")), ErrorCode::InvalidArgument);
}

#[test]
fn info_events_and_metrics() {
    let daemon = FakeDaemon::start();
    let client = daemon.client();
    let info = client.info().unwrap();
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.parity_engines[0].kind, "cpu");
    assert_eq!(info.parity.choices[0].operation, "pq_gen");

    add(&client, "/tmp/a");
    add(&client, "/tmp/b");
    let events = client.events(0).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
    assert_eq!(events[0].severity, Severity::Info);
    assert_eq!(events[0].kind, "pd_added");
    assert_eq!(client.events(1).unwrap()[0].seq, 2);
    assert!(client.events(2).unwrap().is_empty());

    let metrics = client.metrics().unwrap();
    assert!(
        metrics.contains("\ntessera_physical_drives 2\n"),
        "{metrics}"
    );
}
