//! The write hole, shown and closed: a power cut in the middle of a stripe update, then the loss
//! of a member before resync. Each test stops the engine at a chosen point by not carrying out
//! some member writes (what a power cut does to writes not yet on the media), assembles the
//! group again from the member images with a member missing, and compares what reads return
//! with what was written (the reference is the data the test wrote, not the engine).

use std::sync::Arc;
use tessera_raid::engine::{Command, EngineConfig, HostError, HostOp, MemberOp};
use tessera_raid::geometry::{Column, Level};
use tessera_raid::superblock::JournalMode;
use tessera_sim::harness::Harness;
use tessera_sim::member::copy_overlap;

const CHUNK: u64 = 4096;
const MEMBER_BYTES: u64 = 8 << 20;

fn parity() -> Arc<dyn tessera_parity::Kernel> {
    Arc::new(tessera_parity::Scalar)
}

fn config() -> EngineConfig {
    EngineConfig {
        pool_bytes: 8 << 20,
        coalesce_window_us: 0,
        ..EngineConfig::default()
    }
}

/// A new group, started.
fn started(level: Level, members: usize, mode: JournalMode) -> Harness {
    let mut h = Harness::with_journal(
        level,
        members,
        CHUNK,
        MEMBER_BYTES,
        config(),
        parity(),
        mode,
    );
    h.settle();
    h
}

/// A RAID5 group of three members (two data chunks per stripe) with chunk 0 holding `A` and
/// chunk 1 holding `C`, both durable.
fn group(mode: JournalMode) -> Harness {
    let mut h = started(Level::Raid5, 3, mode);
    if mode == JournalMode::AlwaysOn {
        assert!(
            h.engine.journal_covering(),
            "the journal covers after start"
        );
    }
    h.write(0, &[0xAA; CHUNK as usize]).unwrap();
    h.write(CHUNK, &[0xCC; CHUNK as usize]).unwrap();
    h.flush().unwrap();
    h
}

/// Checks that `data` is `len` bytes of `byte`, reporting what it holds instead if not.
#[track_caller]
fn assert_filled(data: &[u8], byte: u8, what: &str) {
    let mut seen: Vec<u8> = data.to_vec();
    seen.sort_unstable();
    seen.dedup();
    assert!(
        data.len() == CHUNK as usize && data.iter().all(|&b| b == byte),
        "{what}: expected {} bytes of {byte:#04x}, got {} bytes holding {:x?}",
        CHUNK,
        data.len(),
        &seen[..seen.len().min(8)]
    );
}

/// Member holding `column` of stripe 0, and the device offset where its data area starts.
fn holder(h: &Harness, column: Column) -> usize {
    let geometry = h.engine.geometry();
    match column {
        Column::Data(index) => geometry.data_placement(0, index, 0).member,
        Column::Parity(which) => geometry.parity_placement(0, which).member,
    }
}

/// What a member write was for, judged by where it lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Journal,
    Data,
}

/// Carries out the engine's commands, skipping member writes `keep` refuses (they never reach
/// the media), until nothing more happens. Returns (member, device offset) of the journal
/// writes carried out.
fn run_until_stuck(
    h: &mut Harness,
    keep: impl FnMut(usize, u64, Target) -> bool,
) -> Vec<(usize, u64)> {
    run_until_stuck_in_rounds(h, false, keep)
}

/// `run_until_stuck`, but with `together`, the commands given out at once are carried out
/// before the engine hears of any: updates whose reads finish together share a batch.
fn run_until_stuck_in_rounds(
    h: &mut Harness,
    together: bool,
    mut keep: impl FnMut(usize, u64, Target) -> bool,
) -> Vec<(usize, u64)> {
    let data_offset = h.data_offset_bytes();
    let mut journal_writes = Vec::new();
    let mut round = Vec::new();
    loop {
        let Some(command) = h.engine.poll() else {
            if round.is_empty() {
                break;
            }
            h.engine.complete_all(round.drain(..));
            continue;
        };
        let Command::Member(command) = command else {
            continue;
        };
        let member = command.member;
        let result = match command.op.zeroes_as_write() {
            MemberOp::Read {
                offset_bytes,
                buffer,
                ..
            } => {
                h.read_member_image(member, offset_bytes, buffer);
                Ok(())
            }
            MemberOp::Write {
                offset_bytes,
                buffer,
                ..
            } => {
                let target = if offset_bytes >= data_offset {
                    Target::Data
                } else {
                    Target::Journal
                };
                if !keep(member, offset_bytes, target) {
                    continue;
                }
                if target == Target::Journal {
                    journal_writes.push((member, offset_bytes));
                }
                let data = h.engine.pool().bytes(buffer).to_vec();
                let start = offset_bytes as usize;
                h.members[member][start..start + data.len()].copy_from_slice(&data);
                Ok(())
            }
            MemberOp::Flush => Ok(()),
            MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
        };
        if together {
            round.push((command.id, result));
        } else {
            h.engine.complete(command.id, result);
        }
    }
    journal_writes
}

/// The power cut: the engine is gone, the member images stay, `lost` never comes back.
fn crash_and_lose(h: Harness, lost: &[usize]) -> Vec<Option<Vec<u8>>> {
    h.members
        .into_iter()
        .enumerate()
        .map(|(member, image)| (!lost.contains(&member)).then_some(image))
        .collect()
}

/// Cuts the power where `h` stands, in the middle of an update of chunk 1 to `B` whose journal
/// entry is durable, loses chunk 0's member, and checks that neither chunk lost anything: chunk
/// 0 is `A`, as written long before, and chunk 1 `B`, finished by replay.
fn assert_whole_after_losing_chunk0(h: Harness) {
    let lost = holder(&h, Column::Data(0));
    let images = crash_and_lose(h, &[lost]);
    let mut h = Harness::assemble(images, config(), parity());
    assert_filled(
        &h.read(0, CHUNK).expect("chunk 0 readable"),
        0xAA,
        "chunk 0",
    );
    assert_filled(&h.read(CHUNK, CHUNK).unwrap(), 0xBB, "chunk 1");
}

/// Writes `B` over chunk 1 and cuts the power after the data write lands but before the parity
/// write does, then loses the member holding chunk 0 and reads chunk 0 back.
fn torn_update_then_loss(mode: JournalMode) -> (Result<Vec<u8>, HostError>, Vec<u8>) {
    let mut h = group(mode);
    let parity_member = holder(&h, Column::Parity(0));
    h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
    run_until_stuck(&mut h, |member, _, target| {
        target == Target::Journal || member != parity_member
    });
    let lost = holder(&h, Column::Data(0));
    let images = crash_and_lose(h, &[lost]);
    let mut h = Harness::assemble(images, config(), parity());
    let chunk0 = h.read(0, CHUNK);
    let chunk1 = h.read(CHUNK, CHUNK).expect("chunk 1 is on a live member");
    (chunk0, chunk1)
}

#[test]
fn without_the_journal_a_torn_update_and_a_lost_member_lose_acknowledged_data() {
    let (chunk0, _) = torn_update_then_loss(JournalMode::AlwaysOff);
    // Chunk 0 was written and flushed long before; only a neighbouring update was torn. The
    // bitmap makes the loss visible (the read fails) rather than silent, but the data is gone.
    assert_ne!(
        chunk0.as_deref().ok(),
        Some(&[0xAA; CHUNK as usize][..]),
        "the write hole should have cost chunk 0"
    );
}

#[test]
fn with_the_journal_a_torn_update_and_a_lost_member_lose_nothing() {
    let (chunk0, chunk1) = torn_update_then_loss(JournalMode::AlwaysOn);
    assert_filled(&chunk0.expect("chunk 0 readable"), 0xAA, "chunk 0");
    // The update's journal entry was durable, so replay finished it.
    assert_filled(&chunk1, 0xBB, "chunk 1");
}

#[test]
fn a_one_chunk_update_journals_only_its_partial_parity() {
    let mut h = group(JournalMode::AlwaysOn);
    let before = h.engine.status().counters.journal_bytes;
    h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
    let copies = run_until_stuck(&mut h, |_, _, target| target == Target::Journal);
    assert_eq!(copies.len(), 2, "RAID5 keeps two journal copies");
    // Per copy one 4 KiB partial parity and its header, two 4 KiB blocks: a redo entry would
    // carry data and parity, three.
    let bytes = h.engine.status().counters.journal_bytes - before;
    assert_eq!(bytes, 2 * 8192, "journal bytes of the batch");
}

/// `group`, then chunk 1 written again: the first batch after a flush goes in rotation to
/// carry the retirement point the flush moved; from then on a batch may go to its home member
/// alone. (Chunk 1 again, since a write of chunk 0 over the same range would wait for that
/// unretired entry, and the flush it waits for would move the point again.)
fn group_at_rest() -> Harness {
    let mut h = group(JournalMode::AlwaysOn);
    h.write(CHUNK, &[0xCC; CHUNK as usize]).unwrap();
    h
}

#[test]
fn a_one_chunk_update_journals_once_on_its_parity_member() {
    let mut h = group_at_rest();
    let parity_member = holder(&h, Column::Parity(0));
    let before = h.engine.status().counters.journal_bytes;
    h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
    // Torn: chunk 1 gets its new data, parity never does.
    let copies = run_until_stuck(&mut h, |member, _, target| {
        target == Target::Journal || member != parity_member
    });
    assert_eq!(copies.len(), 1, "one copy: {copies:?}");
    assert_eq!(copies[0].0, parity_member, "on the stripe's parity member");
    assert_eq!(
        h.engine.status().counters.journal_bytes - before,
        8192,
        "one partial parity block and its header"
    );
    // The one copy is what makes chunk 0 recoverable once its member is lost.
    assert_whole_after_losing_chunk0(h);
}

#[test]
fn a_full_stripe_write_after_a_replayable_redo_entry_keeps_two_copies() {
    // A redo entry replayed after a power cut would write its data over the full-stripe write
    // that followed it; only the full-stripe write's intent (superseding it) prevents that, so
    // the intent must survive the loss of the parity member: it goes in rotation.
    let mut h = group_at_rest();
    let parity_member = holder(&h, Column::Parity(0));
    h.write(CHUNK / 2, &[0xBB; CHUNK as usize]).unwrap();
    h.submit_write(0, &[0x55; 2 * CHUNK as usize]);
    let copies = run_until_stuck(&mut h, |_, _, _| true);
    assert_eq!(copies.len(), 2, "the intent keeps two copies: {copies:?}");
    h.flush().unwrap();
    let images = crash_and_lose(h, &[parity_member]);
    let mut h = Harness::assemble(images, config(), parity());
    // The full-stripe write, not the older redo entry's data.
    assert_filled(&h.read(0, CHUNK).unwrap(), 0x55, "chunk 0");
    assert_filled(&h.read(CHUNK, CHUNK).unwrap(), 0x55, "chunk 1");
}

#[test]
fn batches_after_a_missing_member_are_numbered_above_all_it_held() {
    // Batches written to the parity member alone are not seen when it is absent at assembly;
    // new batches must still never reuse their numbers, or a stale batch could pass for a new
    // one should the member come back.
    let mut h = group_at_rest();
    let group_uuid = h.engine.superblock().group_uuid;
    let parity_member = holder(&h, Column::Parity(0));
    let mut home_sequences = Vec::new();
    for byte in [0xB1, 0xB2, 0xB3] {
        h.submit_write(CHUNK, &[byte; CHUNK as usize]);
        let copies = run_until_stuck(&mut h, |_, _, _| true);
        assert_eq!(copies.len(), 1, "a home batch: {copies:?}");
        let (member, offset) = copies[0];
        assert_eq!(member, parity_member);
        let batch =
            tessera_raid::journal::decode_batch(&h.members[member][offset as usize..], group_uuid)
                .expect("the batch as written");
        home_sequences.push(batch.header.sequence);
    }
    let images = crash_and_lose(h, &[parity_member]);
    let mut h = Harness::assemble(images, config(), parity());
    assert_filled(&h.read(CHUNK, CHUNK).unwrap(), 0xB3, "chunk 1");
    h.submit_write(0, &[0x11; CHUNK as usize]);
    let copies = run_until_stuck(&mut h, |_, _, _| true);
    assert!(!copies.is_empty(), "the write is journaled (degraded)");
    for (member, offset) in copies {
        let batch = tessera_raid::journal::decode_batch(
            &h.members[member].as_slice()[offset as usize..],
            group_uuid,
        )
        .expect("the batch as written");
        let newest_home = *home_sequences.iter().max().expect("three");
        assert!(
            batch.header.sequence > newest_home,
            "new batch {} above the lost member's {home_sequences:?}",
            batch.header.sequence
        );
    }
}

#[test]
fn a_partial_parity_entry_without_its_chunk_or_parity_leaves_each_whole() {
    // The update of chunk 1 is torn either way round (only its data, or only its parity,
    // lands); then the member it wrote, or the parity member, is lost. Replay cannot use the
    // partial parity without both, and does not need it: chunk 0 is untouched, and chunk 1 is
    // its old or its new contents, since each parity sector is old or new.
    for data_lands in [true, false] {
        for lose_parity in [false, true] {
            let mut h = group(JournalMode::AlwaysOn);
            let chunk1_member = holder(&h, Column::Data(1));
            let parity_member = holder(&h, Column::Parity(0));
            let landing = if data_lands {
                chunk1_member
            } else {
                parity_member
            };
            h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
            run_until_stuck(&mut h, |member, _, target| {
                target == Target::Journal || member == landing
            });
            let lost = if lose_parity {
                parity_member
            } else {
                chunk1_member
            };
            let images = crash_and_lose(h, &[lost]);
            let mut h = Harness::assemble(images, config(), parity());
            let case = format!("data lands {data_lands}, parity lost {lose_parity}");
            assert_filled(
                &h.read(0, CHUNK).unwrap(),
                0xAA,
                &format!("{case}: chunk 0"),
            );
            let chunk1 = h.read(CHUNK, CHUNK).unwrap();
            assert!(
                chunk1.iter().all(|&b| b == 0xBB) || chunk1.iter().all(|&b| b == 0xCC),
                "{case}: chunk 1 holds its old or its new contents, whole"
            );
        }
    }
}

#[test]
fn a_write_after_a_replayable_redo_entry_keeps_its_data_through_replay() {
    // A write spanning both chunks (a redo entry), then a one-chunk write over part of it, both
    // acknowledged and flushed. Until the retirement point passes the first, a replay redoes
    // it; the second must then be replayed after it with its data, not as a partial parity.
    let mut h = group(JournalMode::AlwaysOn);
    let half = CHUNK / 2;
    h.write(half, &[0xBB; CHUNK as usize]).unwrap();
    h.write(CHUNK, &[0x77; (CHUNK / 2) as usize]).unwrap();
    h.flush().unwrap();
    let images = crash_and_lose(h, &[]);
    let mut h = Harness::assemble(images, config(), parity());
    let mut expected = vec![0xAA; half as usize];
    expected.extend_from_slice(&[0xBB; (CHUNK / 2) as usize]);
    expected.extend_from_slice(&[0x77; (CHUNK / 2) as usize]);
    expected.extend_from_slice(&[0xCC; (CHUNK / 2) as usize]);
    assert_eq!(h.read(0, 2 * CHUNK).unwrap(), expected);
}

#[test]
fn a_torn_journal_copy_is_skipped_and_the_other_copy_replayed() {
    // The copies rotate over the members: find a batch whose two copies both survive the loss
    // of chunk 0's member, so that only the intact copy can make the stripe agree.
    for shift in 0..3 {
        let mut h = group(JournalMode::AlwaysOn);
        for _ in 0..shift {
            h.write(CHUNK, &[0xCC; CHUNK as usize]).unwrap();
        }
        let chunk0_member = holder(&h, Column::Data(0));
        let chunk1_member = holder(&h, Column::Data(1));
        h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
        // The batch reaches its copies and chunk 1 its new data; parity never gets its update.
        let copies = run_until_stuck(&mut h, |member, _, target| {
            target == Target::Journal || member == chunk1_member
        });
        assert_eq!(copies.len(), 2, "RAID5 keeps two journal copies");
        if copies.iter().any(|&(member, _)| member == chunk0_member) {
            continue;
        }
        let (damaged, offset) = copies[0];
        h.members[damaged][offset as usize + 100] ^= 0x40;
        let images = crash_and_lose(h, &[chunk0_member]);
        let mut h = Harness::assemble(images, config(), parity());
        assert_filled(&h.read(0, CHUNK).unwrap(), 0xAA, "chunk 0");
        assert_filled(&h.read(CHUNK, CHUNK).unwrap(), 0xBB, "chunk 1");
        return;
    }
    panic!("no batch had both copies away from chunk 0's member");
}

#[test]
fn a_batch_torn_on_every_copy_is_never_replayed() {
    let mut h = group(JournalMode::AlwaysOn);
    h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
    let copies = run_until_stuck(&mut h, |_, _, target| target == Target::Journal);
    for &(member, offset) in &copies {
        // Torn: the tail of the batch never reached the media.
        let start = offset as usize + 2048;
        h.members[member][start..offset as usize + 4096].fill(0);
    }
    let lost = holder(&h, Column::Data(0));
    let images = crash_and_lose(h, &[lost]);
    let mut h = Harness::assemble(images, config(), parity());
    // The write never reached its place and was never acknowledged: the old contents stay,
    // and the stripe is still consistent.
    assert_filled(&h.read(0, CHUNK).unwrap(), 0xAA, "chunk 0");
    assert_filled(&h.read(CHUNK, CHUNK).unwrap(), 0xCC, "chunk 1");
}

/// Writes `data` at `offset_bytes` (its journal entry durable, nothing in place), cuts the
/// power, lets replay write `allowed` blocks in place before the power goes again, then
/// assembles once more without chunk 0's member.
fn crash_during_replay(offset_bytes: u64, data: &[u8], allowed: i32) -> Harness {
    let mut h = group(JournalMode::AlwaysOn);
    h.submit_write(offset_bytes, data);
    run_until_stuck(&mut h, |_, _, target| target == Target::Journal);
    let images = crash_and_lose(h, &[]);
    let mut h = Harness::assemble_unstarted(images, config(), parity());
    let mut allowed = allowed;
    run_until_stuck(&mut h, |_, _, target| {
        if target == Target::Data {
            allowed -= 1;
            allowed >= 0
        } else {
            true
        }
    });
    assert!(
        !h.engine.is_idle() || h.engine.state() == tessera_raid::engine::GroupState::Starting,
        "replay was cut short"
    );
    let lost = holder(&h, Column::Data(0));
    let images = crash_and_lose(h, &[lost]);
    Harness::assemble(images, config(), parity())
}

#[test]
fn a_crash_during_replay_replays_again() {
    // A redo entry (the update spans both data chunks): replay writes its first block in
    // place, then the power goes again.
    let half = CHUNK as usize / 2;
    let mut h = crash_during_replay(half as u64, &[0xBB; CHUNK as usize], 1);
    let mut chunk0 = vec![0xAA; half];
    chunk0.extend_from_slice(&[0xBB; CHUNK as usize / 2]);
    assert_eq!(h.read(0, CHUNK).unwrap(), chunk0, "chunk 0");
    let mut chunk1 = vec![0xBB; half];
    chunk1.extend_from_slice(&[0xCC; CHUNK as usize / 2]);
    assert_eq!(h.read(CHUNK, CHUNK).unwrap(), chunk1, "chunk 1");
    // A partial parity entry: replay reads the data and the power goes before its parity
    // write lands.
    let mut h = crash_during_replay(CHUNK, &[0xBB; CHUNK as usize], 0);
    assert_filled(&h.read(0, CHUNK).unwrap(), 0xAA, "chunk 0");
    let chunk1 = h.read(CHUNK, CHUNK).unwrap();
    assert!(
        chunk1.iter().all(|&b| b == 0xCC),
        "the update never reached chunk 1 and was never acknowledged"
    );
}

/// Member write caches: writes since each member's last flush, lost by a power cut.
type Caches = Vec<Vec<(usize, Vec<u8>)>>;

/// Carries out the engine's commands with volatile member caches: a write is acknowledged at
/// once but reaches the member image only with the member's next flush (a FUA write at once);
/// reads see the cache.
fn run_with_caches(h: &mut Harness, caches: &mut Caches) {
    caches.resize(h.members.len(), Vec::new());
    while let Some(command) = h.engine.poll() {
        let Command::Member(command) = command else {
            continue;
        };
        let member = command.member;
        match command.op.zeroes_as_write() {
            MemberOp::Read {
                offset_bytes,
                buffer,
                ..
            } => {
                let out = h.read_member_image(member, offset_bytes, buffer);
                for (at, data) in &caches[member] {
                    copy_overlap(*at as u64, data, offset_bytes, out);
                }
            }
            MemberOp::Write {
                offset_bytes,
                buffer,
                fua,
            } => {
                let data = h.engine.pool().bytes(buffer).to_vec();
                let start = offset_bytes as usize;
                if fua {
                    // Straight to the media, and cached older data there is replaced.
                    h.members[member][start..start + data.len()].copy_from_slice(&data);
                    for (at, cached) in &mut caches[member] {
                        copy_overlap(offset_bytes, &data, *at as u64, cached);
                    }
                } else {
                    caches[member].push((start, data));
                }
            }
            MemberOp::Flush => {
                for (at, data) in std::mem::take(&mut caches[member]) {
                    h.members[member][at..at + data.len()].copy_from_slice(&data);
                }
            }
            MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
        }
        h.engine.complete(command.id, Ok(()));
    }
}

#[test]
fn an_update_over_an_unretired_partial_parity_waits_for_it() {
    // Chunk 1 is rewritten (a partial parity entry), then chunk 0 over the same range before
    // anything is flushed. Had the second update not waited for the first to retire, its
    // partial parity would assume chunk 1's new contents, which the power cut takes away when
    // no flush reached chunk 1's member; replay would then leave parity that rebuilds chunk 2,
    // flushed long before, wrong. Batches rotate over the members, so every starting point of
    // the rotation is tried.
    for shift in 0..5 {
        let mut h = started(Level::Raid5, 5, JournalMode::AlwaysOn);
        for (chunk, byte) in [(0, 0xAA), (1, 0xCC), (2, 0x22), (3, 0x33)] {
            h.write(chunk * CHUNK, &[byte; CHUNK as usize]).unwrap();
        }
        for _ in 0..shift {
            h.write(3 * CHUNK, &[0x33; CHUNK as usize]).unwrap();
        }
        h.flush().unwrap();
        let mut caches = Caches::new();
        h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
        run_with_caches(&mut h, &mut caches);
        h.submit_write(0, &[0x11; CHUNK as usize]);
        run_with_caches(&mut h, &mut caches);
        assert!(h.engine.is_idle(), "both writes finished");
        let lost = holder(&h, Column::Data(2));
        let images = crash_and_lose(h, &[lost]);
        let mut h = Harness::assemble(images, config(), parity());
        assert_filled(
            &h.read(2 * CHUNK, CHUNK).unwrap(),
            0x22,
            &format!("rotation {shift}: chunk 2"),
        );
        for (chunk, old, new) in [(0, 0xAA, 0x11), (1, 0xCC, 0xBB)] {
            let data = h.read(chunk * CHUNK, CHUNK).unwrap();
            assert!(
                data.iter().all(|&b| b == old) || data.iter().all(|&b| b == new),
                "rotation {shift}: chunk {chunk} holds its old or its new contents, whole"
            );
        }
    }
}

/// The member images after a power cut tore a full-stripe write of `0x11`, `0x22` over
/// `group`'s `A`, `C`: chunk 0's new data landed, chunk 1 and the parity did not.
fn torn_full_stripe_write() -> Vec<Option<Vec<u8>>> {
    let mut h = group(JournalMode::AlwaysOn);
    let chunk1_member = holder(&h, Column::Data(1));
    let parity_member = holder(&h, Column::Parity(0));
    let mut full = vec![0x11; CHUNK as usize];
    full.extend_from_slice(&[0x22; CHUNK as usize]);
    h.submit_write(0, &full);
    run_until_stuck(&mut h, |member, _, target| {
        target == Target::Journal || (member != chunk1_member && member != parity_member)
    });
    crash_and_lose(h, &[])
}

#[test]
fn a_torn_full_stripe_write_is_made_consistent_by_replay() {
    let h = Harness::assemble(torn_full_stripe_write(), config(), parity());
    // Replay recomputed the stripe's parity from its data, so losing chunk 1's member now
    // rebuilds what chunk 1 holds (its old contents), not a mixture.
    let chunk1_member = holder(&h, Column::Data(1));
    let images = crash_and_lose(h, &[chunk1_member]);
    let mut h = Harness::assemble(images, config(), parity());
    assert_filled(&h.read(0, CHUNK).unwrap(), 0x11, "chunk 0");
    assert_filled(&h.read(CHUNK, CHUNK).unwrap(), 0xCC, "chunk 1");
}

#[test]
fn a_read_error_replaying_a_torn_full_stripe_write_loses_only_the_failing_sector() {
    // Journal seed 46618: a full-stripe write torn by the power cut (chunk 0's new data lands,
    // chunk 1 and parity keep their old contents), and a latent error on one sector of chunk
    // 1's member. Parity of a torn stripe cannot recover that sector, and must not stand in
    // for the chunk's other sectors, which still read.
    const BAD_SECTOR: u64 = 3;
    let mut h = Harness::assemble_unstarted(torn_full_stripe_write(), config(), parity());
    let chunk1_member = holder(&h, Column::Data(1));
    let bad_device_sector = (h.data_offset_bytes() + BAD_SECTOR * 512) / 512;
    h.latent_errors.insert((chunk1_member, bad_device_sector));
    h.settle();
    let sectors = CHUNK / 512;
    for sector in 0..sectors {
        let result = h.read(CHUNK + sector * 512, 512);
        if sector == BAD_SECTOR {
            assert!(result.is_err(), "the failing sector is lost, not guessed");
            continue;
        }
        let data = result.expect("a sector that reads is kept");
        assert!(
            data.iter().all(|&b| b == 0xCC) || data.iter().all(|&b| b == 0x22),
            "chunk 1 sector {sector} holds neither its old nor its new contents"
        );
    }
    // Parity agrees with what the stripe holds now: losing chunk 0's member rebuilds it whole.
    let chunk0_member = holder(&h, Column::Data(0));
    let images = crash_and_lose(h, &[chunk0_member]);
    let mut h = Harness::assemble(images, config(), parity());
    let chunk0 = h.read(0, CHUNK).expect("chunk 0 recovered from parity");
    assert!(
        filled_with(&chunk0, 0x11) || filled_with(&chunk0, 0xAA),
        "chunk 0 recovered as a mixture"
    );
}

#[test]
fn switching_the_journal_off_and_on_moves_coverage() {
    let mut h = group(JournalMode::AlwaysOn);
    h.engine.set_journal_mode(JournalMode::AlwaysOff).unwrap();
    h.settle();
    assert!(!h.engine.journal_covering());
    assert!(!h.engine.journal_status().active);
    h.write(0, &[0x33; CHUNK as usize]).unwrap();
    h.engine.set_journal_mode(JournalMode::AlwaysOn).unwrap();
    h.settle();
    assert!(h.engine.journal_covering());
    let before = h.engine.status().counters.journal_entries;
    h.write(CHUNK, &[0x44; CHUNK as usize]).unwrap();
    assert_eq!(h.engine.status().counters.journal_entries, before + 1);
    assert_eq!(
        h.read(0, 2 * CHUNK).unwrap()[..CHUNK as usize],
        [0x33; CHUNK as usize]
    );
}

#[test]
fn degrade_only_journals_while_degraded() {
    let mut h = group(JournalMode::DegradeOnly);
    assert!(!h.engine.journal_status().active);
    let before = h.engine.status().counters.journal_entries;
    h.write(0, &[0x55; CHUNK as usize]).unwrap();
    assert_eq!(h.engine.status().counters.journal_entries, before);
    h.engine.fail_member_admin(holder(&h, Column::Data(1)));
    h.settle();
    assert!(h.engine.journal_status().active);
    assert!(h.engine.journal_covering());
    h.write(0, &[0x66; CHUNK as usize]).unwrap();
    assert_eq!(h.engine.status().counters.journal_entries, before + 1);
}

/// The RAID5 group of `group`, with its journal on a dedicated device (member 3).
fn group_with_journal_device() -> Harness {
    let mut h =
        Harness::with_journal_device(Level::Raid5, 3, CHUNK, MEMBER_BYTES, config(), parity());
    h.settle();
    assert!(
        h.engine.journal_covering(),
        "the journal covers after start"
    );
    h.write(0, &[0xAA; CHUNK as usize]).unwrap();
    h.write(CHUNK, &[0xCC; CHUNK as usize]).unwrap();
    h.flush().unwrap();
    h
}

const JOURNAL_DEVICE: usize = 3;

#[test]
fn a_journal_device_holds_the_batches_and_closes_the_hole() {
    let mut h = group_with_journal_device();
    let parity_member = holder(&h, Column::Parity(0));
    h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
    let copies = run_until_stuck(&mut h, |member, _, target| {
        target == Target::Journal || member != parity_member
    });
    assert!(
        !copies.is_empty() && copies.iter().all(|&(member, _)| member == JOURNAL_DEVICE),
        "batches go to the journal device only: {copies:?}"
    );
    assert_whole_after_losing_chunk0(h);
}

#[test]
fn a_lost_journal_device_falls_back_to_resync_and_the_members_journal() {
    let mut h = group_with_journal_device();
    let parity_member = holder(&h, Column::Parity(0));
    h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
    run_until_stuck(&mut h, |member, _, target| {
        target == Target::Journal || member != parity_member
    });
    // The power cut takes the journal device with it: what it held cannot be replayed, so the
    // torn stripe must be resynced from the bitmap instead, never trusted.
    let images = crash_and_lose(h, &[JOURNAL_DEVICE]);
    let mut h = Harness::assemble(images, config(), parity());
    assert_filled(&h.read(0, CHUNK).unwrap(), 0xAA, "chunk 0");
    let chunk1 = h.read(CHUNK, CHUNK).unwrap();
    assert!(
        chunk1.iter().all(|&b| b == 0xBB) || chunk1.iter().all(|&b| b == 0xCC),
        "chunk 1 holds the old or the new write, whole"
    );
    // Journaling goes on, on the members' own areas, and covers again once resynced.
    h.settle();
    assert!(
        h.engine.journal_covering(),
        "coverage is re-established on the members"
    );
    h.submit_write(CHUNK, &[0xDD; CHUNK as usize]);
    let journal_offset = h.engine.superblock().journal_offset_bytes;
    let copies: Vec<_> = run_until_stuck(&mut h, |_, _, _| true)
        .into_iter()
        .filter(|&(_, offset)| offset >= journal_offset)
        .collect();
    // A partial parity entry: one copy, on the stripe's parity member.
    assert!(
        copies == [(parity_member, copies[0].1)],
        "the batch now goes to the parity member: {copies:?}"
    );
    assert_filled(&h.read(CHUNK, CHUNK).unwrap(), 0xDD, "chunk 1 rewritten");
}

/// A member fails and a power cut takes the superblock that records it: the member comes back
/// as online with what it held. Updates planned without it must not have run meanwhile, or
/// its columns no longer match the rest of their stripes and a later loss rebuilds garbage
/// (simulator seed 24842, RAID6 with the journal on). Checked with the journal on and off
/// (resync), for a failed parity member and a failed data member.
/// A write of chunk 1 while a member failure is not yet recorded (the superblock writes that
/// would record it never reach the media), then a power cut that brings the failed member
/// back: every acknowledged write must survive a loss within redundancy. With
/// `fail_after_reads` the update has read what it needs before the failure and computes
/// after it (as md's stripe handling would if it did not check again).
fn update_around_an_unrecorded_failure(
    members: usize,
    mode: JournalMode,
    failed_column: Column,
    fail_after_reads: bool,
) {
    let superblock = |offset: u64| {
        let len = tessera_raid::superblock::SUPERBLOCK_BYTES as u64;
        tessera_raid::superblock::SUPERBLOCK_OFFSETS
            .iter()
            .any(|&at| (at..at + len).contains(&offset))
    };
    let what = format!(
        "{members} members, {mode:?}, {failed_column:?} failed, after the reads {fail_after_reads}"
    );
    let mut h = started(Level::Raid5, members, mode);
    for (chunk, byte) in [(0, 0xAA), (1, 0xCC), (2, 0x22)] {
        h.write(chunk * CHUNK, &[byte; CHUNK as usize]).unwrap();
    }
    h.flush().unwrap();
    h.settle();
    let failed = holder(&h, failed_column);
    if !fail_after_reads {
        h.engine.fail_member_admin(failed);
    }
    let id = h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
    if fail_after_reads {
        // The reads are carried out but their completions held back past the failure;
        // anything else (metadata) goes through.
        let mut reads = Vec::new();
        while let Some(command) = h.engine.poll() {
            let Command::Member(command) = command else {
                continue;
            };
            match command.op.zeroes_as_write() {
                MemberOp::Read {
                    offset_bytes,
                    buffer,
                    ..
                } => {
                    h.read_member_image(command.member, offset_bytes, buffer);
                    reads.push(command.id);
                }
                MemberOp::Write {
                    offset_bytes,
                    buffer,
                    ..
                } => {
                    let data = h.engine.pool().bytes(buffer).to_vec();
                    let start = offset_bytes as usize;
                    h.members[command.member][start..start + data.len()].copy_from_slice(&data);
                    h.engine.complete(command.id, Ok(()));
                }
                MemberOp::Flush => h.engine.complete(command.id, Ok(())),
                MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
            }
        }
        assert!(!reads.is_empty(), "{what}: the update reads first");
        h.engine.fail_member_admin(failed);
        for read in reads {
            h.engine.complete(read, Ok(()));
        }
    }
    run_until_stuck(&mut h, |_, offset, _| !superblock(offset));
    assert!(
        h.take_reply(id).is_none(),
        "{what}: a write acknowledged before the failure was recorded"
    );
    // Power cut; the failed member is back. With the journal, the member of chunk 2 is lost
    // with the power; without it, a loss before resync is the hole the journal closes, so
    // chunk 2's member fails once the group has resynced.
    let chunk2 = holder(&h, Column::Data(2));
    let journaled = mode == JournalMode::AlwaysOn;
    let lost: &[usize] = if journaled { &[chunk2] } else { &[] };
    let images = crash_and_lose(h, lost);
    let mut h = Harness::assemble(images, config(), parity());
    h.settle();
    if !journaled {
        h.engine.fail_member_admin(chunk2);
        h.settle();
    }
    assert_filled(
        &h.read(2 * CHUNK, CHUNK).unwrap(),
        0x22,
        &format!("{what}: chunk 2 rebuilt from the rest of its stripe"),
    );
    let chunk1 = h.read(CHUNK, CHUNK).unwrap();
    assert!(
        chunk1.iter().all(|&b| b == 0xCC) || chunk1.iter().all(|&b| b == 0xBB),
        "{what}: chunk 1 holds its old or its new contents, whole"
    );
}

#[test]
fn updates_wait_until_a_member_failure_is_recorded() {
    for mode in [JournalMode::AlwaysOn, JournalMode::AlwaysOff] {
        for failed_column in [Column::Parity(0), Column::Data(1)] {
            update_around_an_unrecorded_failure(4, mode, failed_column, false);
        }
    }
}

#[test]
fn updates_that_read_before_a_member_failure_wait_until_it_is_recorded() {
    // Simulator seed 40,906 with TESSERA_SIM_JOURNAL=always_on (RAID6): P's member failed
    // while an update's reads were done; the update wrote data and Q, the power went before
    // the failure was recorded, P came back stale and a later loss rebuilt from it. Five
    // members, so that a one-chunk update reads and writes in place (read-modify-write),
    // where parity a failed member holds is left out of the update.
    for mode in [JournalMode::AlwaysOn, JournalMode::AlwaysOff] {
        for failed_column in [Column::Parity(0), Column::Data(0)] {
            update_around_an_unrecorded_failure(5, mode, failed_column, true);
        }
    }
}

#[test]
fn a_replayed_full_stripe_intent_with_a_lost_data_chunk_leaves_the_stripe_whole() {
    // RAID6 of four (two data chunks): a full-stripe write whose Q write the power cut takes
    // while data and P land, and the member of data chunk 0 lost with it. Replay resyncs the
    // stripe its intent names: the lost chunk may be anything (the write was never promised),
    // but P and Q must agree with the data again, or a later loss would rebuild from a parity
    // that disagrees with the other (simulator seed 3475 with TESSERA_SIM_THIN=on).
    let mut h = started(Level::Raid6, 4, JournalMode::AlwaysOn);
    h.write(0, &[0xAA; 2 * CHUNK as usize]).unwrap();
    h.flush().unwrap();
    let q_member = holder(&h, Column::Parity(1));
    let mut data = vec![0x11; CHUNK as usize];
    data.extend_from_slice(&[0x22; CHUNK as usize]);
    h.submit_write(0, &data);
    run_until_stuck(&mut h, |member, _, target| {
        target == Target::Journal || member != q_member
    });
    let lost = holder(&h, Column::Data(0));
    let data_member = holder(&h, Column::Data(1));
    let p_member = holder(&h, Column::Parity(0));
    let images = crash_and_lose(h, &[lost]);
    let h = Harness::assemble(images, config(), parity());
    let at = h.data_offset_bytes() as usize;
    let chunk = |member: usize| &h.members[member][at..at + CHUNK as usize];
    let d1 = chunk(data_member);
    // Data chunk 0 as P says it is, and then what Q must be.
    let d0: Vec<u8> = chunk(p_member).iter().zip(d1).map(|(p, d)| p ^ d).collect();
    let mut p = vec![0u8; CHUNK as usize];
    let mut q = vec![0u8; CHUNK as usize];
    tessera_parity::Kernel::pq_gen(&tessera_parity::Naive, &[&d0, d1], &mut p, &mut q);
    assert!(q == chunk(q_member), "Q disagrees with the data P gives");
}

/// Whether `data` is one chunk all of `byte`.
fn filled_with(data: &[u8], byte: u8) -> bool {
    data.len() == CHUNK as usize && data.iter().all(|&b| b == byte)
}

#[test]
fn a_torn_full_stripe_write_on_a_degraded_stripe_journals_only_the_missing_column() {
    // RAID5 of three, the member of data chunk 1 failed (the journal is on while degraded): a
    // full-stripe write whose parity write the power cut takes while chunk 0 lands. Chunk 1
    // lives only in parity: without its new contents in the journal it would read back as
    // neither its old nor its new contents. The entry carries that column alone, not the
    // whole stripe.
    let mut h = group(JournalMode::DegradeOnly);
    h.engine.fail_member_admin(holder(&h, Column::Data(1)));
    h.settle();
    assert!(h.engine.journal_status().active);
    let parity_member = holder(&h, Column::Parity(0));
    let before = h.engine.status().counters.journal_bytes;
    let mut full = vec![0x11; CHUNK as usize];
    full.extend_from_slice(&[0x22; CHUNK as usize]);
    h.submit_write(0, &full);
    run_until_stuck(&mut h, |member, _, target| {
        target == Target::Journal || member != parity_member
    });
    let journaled = h.engine.status().counters.journal_bytes - before;
    // Two copies (parity + 1) of a batch: a 4 KiB header block and one chunk of payload. The
    // whole stripe (two data chunks and parity) would take 16 KiB a copy.
    assert_eq!(journaled, 2 * (4096 + CHUNK), "one column journaled");
    let images = crash_and_lose(h, &[]);
    let mut h = Harness::assemble(images, config(), parity());
    assert_filled(&h.read(0, CHUNK).unwrap(), 0x11, "chunk 0");
    assert_filled(
        &h.read(CHUNK, CHUNK).unwrap(),
        0x22,
        "chunk 1, from replayed parity",
    );
}

#[test]
fn a_replayed_supplied_intent_makes_both_parities_agree_with_the_supplied_column() {
    // RAID6 of four, data chunk 0's member failed: a full-stripe write of which only P lands.
    // Replay recomputes P and Q from chunk 1 as it is and chunk 0's journaled contents, so a
    // later loss of P's member still gives chunk 0's new contents (from Q).
    let mut h = started(Level::Raid6, 4, JournalMode::DegradeOnly);
    h.write(0, &[0xAA; 2 * CHUNK as usize]).unwrap();
    h.flush().unwrap();
    h.engine.fail_member_admin(holder(&h, Column::Data(0)));
    h.settle();
    let p_member = holder(&h, Column::Parity(0));
    let mut data = vec![0x11; CHUNK as usize];
    data.extend_from_slice(&[0x22; CHUNK as usize]);
    h.submit_write(0, &data);
    run_until_stuck(&mut h, |member, _, target| {
        target == Target::Journal || member == p_member
    });
    let images = crash_and_lose(h, &[]);
    let mut h = Harness::assemble(images, config(), parity());
    let chunk1 = h.read(CHUNK, CHUNK).unwrap();
    assert!(
        filled_with(&chunk1, 0x22) || filled_with(&chunk1, 0xAA),
        "chunk 1 is old or new"
    );
    assert_filled(&h.read(0, CHUNK).unwrap(), 0x11, "chunk 0 after replay");
    let p_member = holder(&h, Column::Parity(0));
    let images = crash_and_lose(h, &[p_member]);
    let mut h = Harness::assemble(images, config(), parity());
    assert_filled(&h.read(0, CHUNK).unwrap(), 0x11, "chunk 0 from Q");
    assert_eq!(h.read(CHUNK, CHUNK).unwrap(), chunk1, "chunk 1 unchanged");
}

/// A RAID6 group of `members` with data chunk `d` of stripe 0 holding `0xA0 + d`, durable, and
/// chunk 1 written again after the flush (so the next batch may go to its home members, as in
/// `group_at_rest`).
fn raid6_at_rest(members: usize) -> Harness {
    let mut h = started(Level::Raid6, members, JournalMode::AlwaysOn);
    assert!(
        h.engine.journal_covering(),
        "the journal covers after start"
    );
    for chunk in 0..members as u64 - 2 {
        h.write(chunk * CHUNK, &[0xA0 + chunk as u8; CHUNK as usize])
            .unwrap();
    }
    h.flush().unwrap();
    h.write(CHUNK, &[0xA1; CHUNK as usize]).unwrap();
    h
}

/// Every pair of members, every single one, and none.
fn losses_up_to_two(members: usize) -> Vec<Vec<usize>> {
    let mut losses = vec![Vec::new()];
    for a in 0..members {
        losses.push(vec![a]);
        for b in a + 1..members {
            losses.push(vec![a, b]);
        }
    }
    losses
}

/// Checks on the member images, with the naive kernel as the reference, that stripe 0's P and
/// Q (where their members are present) agree with its data: the data chunks as their members
/// hold them, a missing one (at most one, with P present) taken from P.
fn assert_p_and_q_agree(h: &Harness, data_chunks: usize) {
    assert_p_and_q_agree_in(h, 0, data_chunks);
}

/// `assert_p_and_q_agree` for stripe `stripe` (one chunk a member, so row `stripe`).
fn assert_p_and_q_agree_in(h: &Harness, stripe: u64, data_chunks: usize) {
    let at = (h.data_offset_bytes() + stripe * CHUNK) as usize;
    let geometry = h.engine.geometry();
    let image = |column| {
        let member = match column {
            Column::Data(index) => geometry.data_placement(stripe, index, 0).member,
            Column::Parity(which) => geometry.parity_placement(stripe, which).member,
        };
        let image = &h.members[member];
        (!image.is_empty()).then(|| image[at..at + CHUNK as usize].to_vec())
    };
    let p_image = image(Column::Parity(0));
    let q_image = image(Column::Parity(1));
    let mut data: Vec<Option<Vec<u8>>> = (0..data_chunks)
        .map(|index| image(Column::Data(index)))
        .collect();
    let missing: Vec<usize> = (0..data_chunks).filter(|&i| data[i].is_none()).collect();
    match (&missing[..], &p_image) {
        ([], _) => {}
        ([lost], Some(p)) => {
            let mut chunk = p.clone();
            for other in data.iter().flatten() {
                chunk.iter_mut().zip(other).for_each(|(c, o)| *c ^= o);
            }
            data[*lost] = Some(chunk);
        }
        // Nothing left for the parities to disagree about.
        _ => return,
    }
    let data: Vec<Vec<u8>> = data.into_iter().flatten().collect();
    let sources: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut p = vec![0u8; CHUNK as usize];
    let mut q = vec![0u8; CHUNK as usize];
    tessera_parity::Kernel::pq_gen(&tessera_parity::Naive, &sources, &mut p, &mut q);
    if missing.is_empty()
        && let Some(p_image) = &p_image
    {
        assert!(*p_image == p, "P disagrees with the data");
    }
    if let Some(q_image) = &q_image {
        assert!(*q_image == q, "Q disagrees with the data");
    }
}

#[test]
fn a_raid6_one_chunk_update_journals_p_and_q_partial_parity_on_its_parity_members() {
    // Five members take reconstruct-write for a one-chunk update (two reads), seven
    // read-modify-write (three): both leave the partial P on P's member and the partial Q on
    // Q's, each in its piece of the batch. The update of
    // chunk 1 is torn in every way (each of its data, P and Q writes lands or not), then any
    // one or two members are lost: chunks the update did not touch read back exact, chunk 1
    // old or new whole (new when its member kept the data), and P and Q agree with the data.
    for members in [5, 7] {
        let data_chunks = members - 2;
        for lands in 0..8u8 {
            for lost in losses_up_to_two(members) {
                let mut h = raid6_at_rest(members);
                let d1 = holder(&h, Column::Data(1));
                let p = holder(&h, Column::Parity(0));
                let q = holder(&h, Column::Parity(1));
                let landing = |member: usize| {
                    (member == d1 && lands & 1 != 0)
                        || (member == p && lands & 2 != 0)
                        || (member == q && lands & 4 != 0)
                };
                let before = h.engine.status().counters.journal_bytes;
                h.submit_write(CHUNK, &[0xBB; CHUNK as usize]);
                let mut copies = run_until_stuck(&mut h, |member, _, target| {
                    target == Target::Journal || landing(member)
                });
                copies.sort_unstable();
                let homes: Vec<usize> = copies.iter().map(|&(member, _)| member).collect();
                let mut parity_members = vec![p, q];
                parity_members.sort_unstable();
                assert_eq!(homes, parity_members, "one piece on each parity member");
                assert_eq!(
                    h.engine.status().counters.journal_bytes - before,
                    2 * 8192,
                    "per piece a header and its own parity's partial parity"
                );
                let case = format!("{members} members, lands {lands:03b}, lost {lost:?}");
                let images = crash_and_lose(h, &lost);
                let mut h = Harness::assemble(images, config(), parity());
                for chunk in 0..data_chunks as u64 {
                    let read = h.read(chunk * CHUNK, CHUNK).expect("within redundancy");
                    if chunk != 1 {
                        assert_filled(&read, 0xA0 + chunk as u8, &format!("{case}: chunk {chunk}"));
                    } else if lands & 1 != 0 && !lost.contains(&d1) {
                        assert_filled(&read, 0xBB, &format!("{case}: chunk 1"));
                    } else {
                        assert!(
                            filled_with(&read, 0xBB) || filled_with(&read, 0xA1),
                            "{case}: chunk 1 holds its old or its new contents, whole"
                        );
                    }
                }
                assert_p_and_q_agree(&h, data_chunks);
            }
        }
    }
}

/// One batch with one-chunk updates of two RAID6 stripes whose parities sit on different
/// members is split into a piece per parity member, each with only its own parity's partial
/// parity (a piece on the member holding P of one stripe and Q of the other holds both).
/// Every way the updates' data and parity writes land or not, then any one or two members
/// lost: untouched chunks read back exact, the updated ones old or new whole, and P and Q of
/// both stripes agree with their data.
#[test]
fn a_batch_over_stripes_with_other_parity_members_goes_in_a_piece_to_each() {
    const MEMBERS: usize = 6;
    const DATA_CHUNKS: u64 = MEMBERS as u64 - 2;
    let updates = [(0u64, 1usize, 0xB1u8), (1, 1, 0xB5)];
    for lands in [
        0u8, 0b111111, 0b000111, 0b111000, 0b101010, 0b010101, 0b100100, 0b011011,
    ] {
        for lost in losses_up_to_two(MEMBERS) {
            let mut h = started(Level::Raid6, MEMBERS, JournalMode::AlwaysOn);
            for chunk in 0..2 * DATA_CHUNKS {
                h.write(chunk * CHUNK, &[0xA0 + chunk as u8; CHUNK as usize])
                    .unwrap();
            }
            h.flush().unwrap();
            // The first batch after the flush carries its retirement point, in rotation.
            h.write(CHUNK, &[0xA1; CHUNK as usize]).unwrap();
            let geometry = *h.engine.geometry();
            // Bit 3u + 0, 1, 2: update u's data, P and Q writes land.
            let mut targets = Vec::new();
            for (u, &(stripe, index, _)) in updates.iter().enumerate() {
                let d = geometry.data_placement(stripe, index, 0).member;
                let p = geometry.parity_placement(stripe, 0).member;
                let q = geometry.parity_placement(stripe, 1).member;
                for (bit, member) in [d, p, q].into_iter().enumerate() {
                    targets.push((member, stripe, lands >> (3 * u + bit) & 1 != 0));
                }
            }
            let mut homes: Vec<usize> = targets[1..3]
                .iter()
                .chain(&targets[4..6])
                .map(|&(member, _, _)| member)
                .collect();
            homes.sort_unstable();
            homes.dedup();
            assert_eq!(homes.len(), 3, "the stripes share one parity member");
            let before = h.engine.status().counters;
            for &(stripe, index, byte) in &updates {
                let chunk = stripe * DATA_CHUNKS + index as u64;
                h.submit_write(chunk * CHUNK, &[byte; CHUNK as usize]);
            }
            let data_offset = h.data_offset_bytes();
            let mut pieces = run_until_stuck_in_rounds(&mut h, true, |member, offset, target| {
                let row = offset.saturating_sub(data_offset) / CHUNK;
                target == Target::Journal
                    || targets
                        .iter()
                        .any(|&(m, stripe, land)| m == member && stripe == row && land)
            });
            let after = h.engine.status().counters;
            assert_eq!(
                after.journal_batches - before.journal_batches,
                1,
                "one batch"
            );
            pieces.sort_unstable();
            let members: Vec<usize> = pieces.iter().map(|&(member, _)| member).collect();
            assert_eq!(members, homes, "one piece on each parity member");
            // A piece is its header and descriptors (512 bytes) and a chunk of partial parity
            // per entry, in whole 4 KiB blocks: 8 KiB, and 12 KiB on the shared member.
            assert_eq!(
                after.journal_bytes - before.journal_bytes,
                2 * 8192 + 12288,
                "each piece a header and its member's partial parities"
            );
            let case = format!("lands {lands:06b}, lost {lost:?}");
            let images = crash_and_lose(h, &lost);
            let mut h = Harness::assemble(images, config(), parity());
            for chunk in 0..2 * DATA_CHUNKS {
                let read = h.read(chunk * CHUNK, CHUNK).expect("within redundancy");
                let old = 0xA0 + chunk as u8;
                let updated = updates
                    .iter()
                    .enumerate()
                    .find(|&(_, &(stripe, index, _))| stripe * DATA_CHUNKS + index as u64 == chunk);
                match updated {
                    None => assert_filled(&read, old, &format!("{case}: chunk {chunk}")),
                    Some((u, &(_, _, byte))) => {
                        let (member, _, landed) = targets[3 * u];
                        if landed && !lost.contains(&member) {
                            assert_filled(&read, byte, &format!("{case}: chunk {chunk}"));
                        } else {
                            assert!(
                                filled_with(&read, byte) || filled_with(&read, old),
                                "{case}: chunk {chunk} holds its old or its new contents, whole"
                            );
                        }
                    }
                }
            }
            for stripe in 0..2 {
                assert_p_and_q_agree_in(&h, stripe, DATA_CHUNKS as usize);
            }
        }
    }
}

/// A RAID5 batch is split into pieces only when they cost less than two whole copies, a write
/// counted as 16 KiB on top of its bytes: one-chunk updates of two stripes with different
/// parity members go in two pieces of 8 KiB (48 KiB counted, against 2 × 28), of four stripes
/// in two whole copies of 20 KiB (2 × 36 counted, against 4 × 24).
#[test]
fn raid5_batches_split_only_when_the_pieces_cost_less() {
    const MEMBERS: usize = 5;
    const DATA_CHUNKS: u64 = MEMBERS as u64 - 1;
    for (stripes, writes, bytes) in [(2u64, 2, 2 * 8192), (4, 2, 2 * 20480)] {
        let mut h = started(Level::Raid5, MEMBERS, JournalMode::AlwaysOn);
        for chunk in 0..stripes * DATA_CHUNKS {
            h.write(chunk * CHUNK, &[0xA0; CHUNK as usize]).unwrap();
        }
        h.flush().unwrap();
        // The first batch after the flush carries its retirement point, in rotation.
        h.write(CHUNK, &[0xA1; CHUNK as usize]).unwrap();
        let geometry = *h.engine.geometry();
        let mut parity_members: Vec<usize> = (0..stripes)
            .map(|stripe| geometry.parity_placement(stripe, 0).member)
            .collect();
        parity_members.sort_unstable();
        parity_members.dedup();
        assert_eq!(parity_members.len() as u64, stripes, "parity rotates");
        let before = h.engine.status().counters;
        for stripe in 0..stripes {
            let chunk = stripe * DATA_CHUNKS + 1;
            h.submit_write(chunk * CHUNK, &[0xB0 + stripe as u8; CHUNK as usize]);
        }
        let mut copies = run_until_stuck_in_rounds(&mut h, true, |_, _, _| true);
        let after = h.engine.status().counters;
        assert_eq!(
            after.journal_batches - before.journal_batches,
            1,
            "one batch"
        );
        assert_eq!(copies.len(), writes, "{stripes} stripes: {copies:?}");
        assert_eq!(
            after.journal_bytes - before.journal_bytes,
            bytes,
            "{stripes} stripes"
        );
        copies.sort_unstable();
        let members: Vec<usize> = copies.iter().map(|&(member, _)| member).collect();
        let split = after.journal_home_batches > before.journal_home_batches;
        assert_eq!(split, stripes == 2, "{stripes} stripes split");
        if split {
            assert_eq!(members, parity_members, "a piece on each parity member");
        }
        for stripe in 0..stripes {
            let chunk = stripe * DATA_CHUNKS + 1;
            assert_filled(
                &h.read(chunk * CHUNK, CHUNK).unwrap(),
                0xB0 + stripe as u8,
                &format!("stripe {stripe}"),
            );
        }
    }
}

/// Stripe updates hold their buffers until their entries are durable, so a batch that could
/// only come from a pool they filled would wait for them forever (simulator seed 15091). The
/// pool here has no free block larger than 4 KiB: the update's reads fit, its batch (header and
/// partial parity, 8 KiB) does not, and it comes from the batch set aside for this.
#[test]
fn a_batch_the_pool_has_no_room_for_is_written_from_the_reserve() {
    let mut h = group(JournalMode::AlwaysOn);
    // The host's data first: host buffers are refused once the pool is this full.
    let data = h.engine.alloc_host_buffer(CHUNK as usize).expect("buffer");
    h.engine.pool_mut().slice_mut(data).fill(0xBB);
    let mut hogs = Vec::new();
    while let Some(buffer) = h.engine.pool_mut().alloc(4096) {
        hogs.push(buffer);
    }
    // Every other 4 KiB block back: free space in pieces no two of which join.
    for buffer in hogs.iter().step_by(2) {
        h.engine.pool_mut().free(*buffer);
    }
    let before = h.engine.status().counters;
    let id = h.submit(HostOp::Write {
        offset_bytes: 0,
        buffer: data,
        fua: false,
    });
    for _ in 0..10_000 {
        if h.answered(id) {
            break;
        }
        h.advance(10);
    }
    let reply = h
        .take_reply(id)
        .unwrap_or_else(|| panic!("the update is never answered: {}", h.engine.debug_summary()));
    reply.expect("the update goes through");
    let after = h.engine.status().counters;
    assert_eq!(
        after.journal_entries - before.journal_entries,
        1,
        "the update was journaled"
    );
    assert_eq!(
        after.journal_reserve_batches - before.journal_reserve_batches,
        1,
        "its batch came from the reserve"
    );
    for buffer in hogs.iter().skip(1).step_by(2) {
        h.engine.pool_mut().free(*buffer);
    }
    assert_filled(&h.read(0, CHUNK).unwrap(), 0xBB, "chunk 0");
    assert_filled(&h.read(CHUNK, CHUNK).unwrap(), 0xCC, "chunk 1");
}
