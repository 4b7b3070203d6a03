//! The table of lost data: ranges of the group's data space whose reads fail until a write
//! covers them. The superblock holds at most `MAX_BAD_RANGES`; when a new range does not fit,
//! the two neighbours with the smallest gap between them are joined, so the table never
//! forgets a loss and the readable data it gives up (the gap) is as little as it can be.

use crate::superblock::BadRange;

/// Records `range` in `table` (sorted, no entry inside another, at most `capacity` entries).
/// False if an entry already covered it.
pub fn record(table: &mut Vec<BadRange>, range: BadRange, capacity: usize) -> bool {
    assert!(
        capacity > 0 && range.len_bytes > 0,
        "a loss to record, room for it"
    );
    if table.iter().any(|existing| covers(existing, &range)) {
        return false;
    }
    table.retain(|existing| !covers(&range, existing));
    let at = table.partition_point(|existing| existing < &range);
    table.insert(at, range);
    while table.len() > capacity {
        let narrowest = (0..table.len() - 1)
            .min_by_key(|&i| gap_bytes(&table[i], &table[i + 1]))
            .expect("two entries or more");
        let next = table.remove(narrowest + 1);
        let joined = &mut table[narrowest];
        let end = end_bytes(joined).max(end_bytes(&next));
        joined.len_bytes = end - joined.offset_bytes;
    }
    true
}

fn end_bytes(range: &BadRange) -> u64 {
    range.offset_bytes + range.len_bytes
}

fn covers(outer: &BadRange, inner: &BadRange) -> bool {
    outer.offset_bytes <= inner.offset_bytes && end_bytes(inner) <= end_bytes(outer)
}

/// Bytes between two ranges in table order (none when they touch or overlap).
fn gap_bytes(first: &BadRange, second: &BadRange) -> u64 {
    second.offset_bytes.saturating_sub(end_bytes(first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn range(offset_bytes: u64, len_bytes: u64) -> BadRange {
        BadRange {
            offset_bytes,
            len_bytes,
        }
    }

    /// Every 512-byte sector the table covers.
    fn sectors(table: &[BadRange]) -> BTreeSet<u64> {
        table
            .iter()
            .flat_map(|r| r.offset_bytes / 512..end_bytes(r) / 512)
            .collect()
    }

    #[test]
    fn ranges_that_fit_are_kept_as_given() {
        let mut table = Vec::new();
        assert!(record(&mut table, range(4096, 512), 4));
        assert!(record(&mut table, range(0, 1024), 4));
        assert!(!record(&mut table, range(512, 512), 4), "already covered");
        assert_eq!(table, vec![range(0, 1024), range(4096, 512)]);
    }

    #[test]
    fn a_full_table_joins_the_closest_neighbours() {
        let mut table = Vec::new();
        for offset in [0, 10_240, 11_264, 40_960] {
            record(&mut table, range(offset, 512), 4);
        }
        record(&mut table, range(81_920, 512), 4);
        // 10,240 and 11,264 are 512 bytes apart, the least of any pair.
        assert_eq!(
            table,
            vec![
                range(0, 512),
                range(10_240, 1536),
                range(40_960, 512),
                range(81_920, 512)
            ]
        );
    }

    #[test]
    fn the_table_covers_every_loss_and_as_little_else_as_a_naive_search_finds() {
        // Against a reference: the union of what was recorded must stay covered, and the
        // table's extra coverage must equal what joining the closest pair each time gives,
        // computed here by brute force over every pair.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for capacity in [1, 2, 3, 8] {
            let mut table = Vec::new();
            let mut naive: Vec<BadRange> = Vec::new();
            let mut lost = BTreeSet::new();
            for _ in 0..200 {
                let r = range((next() % 4096) * 512, (next() % 4 + 1) * 512);
                lost.extend(r.offset_bytes / 512..end_bytes(&r) / 512);
                record(&mut table, r, capacity);
                if !naive.iter().any(|e| covers(e, &r)) {
                    naive.retain(|e| !covers(&r, e));
                    naive.push(r);
                    naive.sort();
                    while naive.len() > capacity {
                        let mut best = (u64::MAX, 0);
                        for i in 0..naive.len() - 1 {
                            let gap = naive[i + 1]
                                .offset_bytes
                                .saturating_sub(end_bytes(&naive[i]));
                            if gap < best.0 {
                                best = (gap, i);
                            }
                        }
                        let i = best.1;
                        let end = end_bytes(&naive[i]).max(end_bytes(&naive[i + 1]));
                        naive[i].len_bytes = end - naive[i].offset_bytes;
                        naive.remove(i + 1);
                    }
                }
                assert!(table.len() <= capacity);
                assert!(table.windows(2).all(|w| w[0] <= w[1]), "sorted");
                assert!(
                    table
                        .windows(2)
                        .all(|w| !covers(&w[0], &w[1]) && !covers(&w[1], &w[0])),
                    "no entry inside another"
                );
                assert!(
                    sectors(&table).is_superset(&lost),
                    "every loss stays recorded"
                );
                assert_eq!(table, naive);
            }
        }
    }
}
