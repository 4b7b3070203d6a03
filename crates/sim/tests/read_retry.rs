//! A read error whose redundancy is lost before the recovery runs: the last copy is read again
//! instead of failing the read outright, since the error may have been transient or the sector
//! rewritten meanwhile. A second failure fails the read; wrong data is never returned.

use tessera_raid::engine::{Command, HostError, HostOp, MemberCommand, MemberError, MemberOp};
use tessera_raid::geometry::Level;
use tessera_sim::harness::Harness;

const CHUNK: u64 = 16 << 10;
const CASES: [(Level, usize); 4] = [
    (Level::Raid1, 2),
    (Level::Raid1, 3),
    (Level::Raid10, 4),
    (Level::Raid5, 3),
];

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37) ^ 0x5c)
        .collect()
}

/// A group holding `pattern` in its first chunk, a read of that chunk submitted, and the
/// member read the engine issued for it (not yet carried out).
fn read_in_flight(level: Level, members: usize) -> (Harness, Vec<u8>, u64, MemberCommand) {
    let mut harness = Harness::for_test(level, members, CHUNK);
    let data = pattern(CHUNK as usize);
    harness.write(0, &data).unwrap();
    harness.flush().unwrap();
    harness.settle();
    let id = harness.submit(HostOp::Read {
        offset_bytes: 0,
        len_bytes: CHUNK,
    });
    let command = match harness.engine.poll() {
        Some(Command::Member(command)) if matches!(command.op, MemberOp::Read { .. }) => command,
        other => panic!("{level:?}: expected the member read, got {other:?}"),
    };
    (harness, data, id, command)
}

/// Fails every other member that could serve the chunk, then fails the read in flight.
fn lose_redundancy_then_fail_read(harness: &mut Harness, command: &MemberCommand) {
    let geometry = *harness.engine.geometry();
    let others: Vec<usize> = if geometry.parity_chunks() > 0 {
        // Any one other member takes a single-parity stripe to its last copy of the chunk.
        vec![(command.member + 1) % geometry.members()]
    } else {
        (0..geometry.copies())
            .map(|copy| geometry.data_placement(0, 0, copy).member)
            .filter(|&member| member != command.member)
            .collect()
    };
    for member in others {
        harness.engine.fail_member_admin(member);
    }
    harness.engine.complete(command.id, Err(MemberError::Io));
    harness.settle();
}

#[test]
fn a_transient_read_error_with_no_redundancy_left_is_read_again() {
    for (level, members) in CASES {
        let (mut harness, data, id, command) = read_in_flight(level, members);
        lose_redundancy_then_fail_read(&mut harness, &command);
        let reply = harness.take_reply(id).expect("answered");
        assert!(
            reply == Ok(Some(data)),
            "{level:?} x{members}: the read is served from the last copy"
        );
    }
}

#[test]
fn a_second_read_error_on_the_last_copy_fails_the_read() {
    for (level, members) in CASES {
        let (mut harness, _, id, command) = read_in_flight(level, members);
        let MemberOp::Read {
            offset_bytes,
            buffer,
            ..
        } = command.op
        else {
            unreachable!()
        };
        let len_bytes = harness.engine.pool().bytes(buffer).len() as u64;
        for sector in offset_bytes / 512..(offset_bytes + len_bytes) / 512 {
            harness.latent_errors.insert((command.member, sector));
        }
        lose_redundancy_then_fail_read(&mut harness, &command);
        assert_eq!(
            harness.take_reply(id).expect("answered"),
            Err(HostError::Io),
            "{level:?} x{members}"
        );
    }
}
