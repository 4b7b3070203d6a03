//! Growing a thin store's physical space: a store that refuses writes for lack of space takes
//! the larger extent, accepts them again, and after a restart over the larger extent every
//! acknowledged and flushed block reads back as a flat reference disk holds it.

use tessera_thin::{HostOp, Store, ThinError};

mod common;

use common::{BLOCK, Lower, block, config, run, submit};

#[test]
fn a_full_store_grown_accepts_writes_and_keeps_them_across_a_restart() {
    let small = 16 << 20;
    let large = 40 << 20;
    let mut lower = Lower::new(large, 0xa5);
    let mut store = Store::create(config(small)).unwrap();
    run(&mut store, &mut lower);
    assert!(store.is_ready());

    // The flat reference: what each block holds once acknowledged.
    let mut reference: Vec<Option<Vec<u8>>> = vec![None; (256 << 20) / BLOCK];
    let mut id = 0;
    let mut write = |store: &mut Store, lower: &mut Lower, lba: u64, version: u64| {
        id += 1;
        let data = block(lba, version);
        let reply = submit(
            store,
            lower,
            id,
            HostOp::Write {
                offset_bytes: lba * BLOCK as u64,
                data: data.clone(),
                fua: false,
            },
        );
        (reply.result, data)
    };

    // Fill until the store refuses.
    let mut next_lba = 0;
    let refused_at = loop {
        let (result, data) = write(&mut store, &mut lower, next_lba, 1);
        match result {
            Ok(_) => reference[next_lba as usize] = Some(data),
            Err(ThinError::NoSpace) => break next_lba,
            Err(other) => panic!("write failed: {other:?}"),
        }
        next_lba += 1;
        assert!(
            next_lba < 16 << 20,
            "a 16 MiB extent took 64 MiB of incompressible data"
        );
    };
    let reply = submit(&mut store, &mut lower, 1 << 40, HostOp::Flush);
    assert_eq!(reply.result, Ok(None));
    let before = store.stats();

    // Shrinking is refused; growing adds free space and the refused write now succeeds.
    assert!(store.grow(small - (4 << 20)).is_err());
    store.grow(large).unwrap();
    run(&mut store, &mut lower);
    let after = store.stats();
    assert!(
        after.physical_bytes > before.physical_bytes + (20 << 20),
        "capacity {} -> {}",
        before.physical_bytes,
        after.physical_bytes
    );
    for lba in refused_at..refused_at + 2048 {
        let (result, data) = write(&mut store, &mut lower, lba, 2);
        assert_eq!(result, Ok(None), "write of block {lba} after growing");
        reference[lba as usize] = Some(data);
    }
    // Overwrites too, so cleaning and checkpoints run over the new segments.
    for round in 3..6 {
        for lba in (0..refused_at + 2048).step_by(3) {
            let (result, data) = write(&mut store, &mut lower, lba, round);
            assert_eq!(result, Ok(None), "overwrite of block {lba}");
            reference[lba as usize] = Some(data);
        }
    }
    let reply = submit(&mut store, &mut lower, 1 << 41, HostOp::Flush);
    assert_eq!(reply.result, Ok(None));

    // A restart over the larger extent, without a clean shutdown: the log is replayed.
    drop(store);
    let mut store = Store::open(config(large)).unwrap();
    run(&mut store, &mut lower);
    assert!(store.is_ready(), "the store did not come back");
    for (lba, expected) in reference.iter().enumerate() {
        let reply = submit(
            &mut store,
            &mut lower,
            (1 << 42) + lba as u64,
            HostOp::Read {
                offset_bytes: (lba * BLOCK) as u64,
                len_bytes: BLOCK as u64,
            },
        );
        let expected = expected.clone().unwrap_or_else(|| vec![0; BLOCK]);
        assert!(
            reply.result == Ok(Some(expected)),
            "block {lba} differs after the restart"
        );
    }
}
