//! A member the administrator failed gets one last superblock write naming it failed. If it is
//! ever assembled alone (the members that know better lost), it is not taken for current: the
//! group is failed and reads fail, instead of returning the data it held when it failed.

use std::sync::Arc;
use tessera_raid::engine::{EngineConfig, GroupState};
use tessera_raid::geometry::Level;
use tessera_sim::harness::Harness;

const CHUNK: u64 = 64 << 10;

fn config() -> EngineConfig {
    EngineConfig {
        pool_bytes: 16 << 20,
        ..EngineConfig::default()
    }
}

#[test]
fn an_admin_failed_mirror_assembled_alone_is_not_served() {
    let mut harness = Harness::for_test(Level::Raid1, 2, CHUNK);
    harness.write(0, &vec![1u8; CHUNK as usize]).unwrap();
    harness.flush().unwrap();
    harness.settle();
    harness.engine.fail_member_admin(1);
    harness.settle();
    let current = vec![2u8; CHUNK as usize];
    harness.write(0, &current).unwrap();
    harness.flush().unwrap();
    harness.settle();

    // The stale member alone: failed, nothing served.
    let images = vec![None, Some(harness.members[1].clone())];
    let mut alone = Harness::assemble(images, config(), Arc::new(tessera_parity::Naive));
    assert_eq!(alone.engine.state(), GroupState::Failed);
    assert!(alone.read(0, CHUNK).is_err(), "no stale data is returned");

    // The current member alone serves the current data.
    let images = vec![Some(harness.members[0].clone()), None];
    let mut current_alone = Harness::assemble(images, config(), Arc::new(tessera_parity::Naive));
    assert_eq!(current_alone.engine.state(), GroupState::Degraded);
    assert!(current_alone.read(0, CHUNK).unwrap() == current);
}
