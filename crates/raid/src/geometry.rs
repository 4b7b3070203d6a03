//! Where every byte of a drive group lives: RAID levels and their member layouts.
//!
//! The group's data space is cut into *stripes*, the unit of locking and of parity:
//! - RAID0/5/6: a stripe is one row of chunks at the same offset on every member (md's
//!   left-symmetric layout for 5 and 6, so placement matches Linux md exactly);
//! - RAID1/10: a stripe is one chunk and its copies (every member for RAID1; two adjacent
//!   "slots" for RAID10 near-2, as md lays them out, odd member counts included).
//!
//! A stripe has `data_chunks()` data chunks, each with `copies()` placements, and
//! `parity_chunks()` parity chunks (P, then Q). Offsets here are relative to the start of each
//! member's data area (`data_offset_bytes` in the superblock).

use std::fmt;

/// Smallest accepted chunk.
pub const MIN_CHUNK_BYTES: u64 = 4096;
/// Largest accepted chunk.
pub const MAX_CHUNK_BYTES: u64 = 1 << 20;
/// Default chunk, as md's.
pub const DEFAULT_CHUNK_BYTES: u64 = 64 * 1024;
/// Most members a group may have.
pub const MAX_MEMBERS: usize = 32;
/// The smallest unit a host request may address.
pub const SECTOR_BYTES: u64 = 512;

/// A RAID level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    Raid0,
    Raid1,
    Raid10,
    Raid5,
    Raid6,
}

impl Level {
    /// Parse the numeric form used by the CLI (`0`, `1`, `10`, `5`, `6`).
    pub fn from_number(number: u32) -> Option<Level> {
        match number {
            0 => Some(Level::Raid0),
            1 => Some(Level::Raid1),
            10 => Some(Level::Raid10),
            5 => Some(Level::Raid5),
            6 => Some(Level::Raid6),
            _ => None,
        }
    }

    pub fn number(self) -> u32 {
        match self {
            Level::Raid0 => 0,
            Level::Raid1 => 1,
            Level::Raid10 => 10,
            Level::Raid5 => 5,
            Level::Raid6 => 6,
        }
    }

    /// The fewest members a group of this level may have.
    pub fn min_members(self) -> usize {
        match self {
            Level::Raid0 | Level::Raid1 | Level::Raid10 | Level::Raid5 => 2,
            Level::Raid6 => 4,
        }
    }

    /// The name of the member layout, as md names it.
    pub fn layout_name(self) -> &'static str {
        match self {
            Level::Raid0 => "striped",
            Level::Raid1 => "mirrored",
            Level::Raid10 => "near-2",
            Level::Raid5 | Level::Raid6 => "left-symmetric",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raid{}", self.number())
    }
}

/// Where one chunk lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Placement {
    pub member: usize,
    /// Offset within the member's data area.
    pub offset_bytes: u64,
}

/// Why a geometry is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GeometryError {
    /// The level needs more members than given, or more than `MAX_MEMBERS` were given.
    MemberCount { level: Level, members: usize },
    /// Chunk size not a power of two within `MIN_CHUNK_BYTES ..= MAX_CHUNK_BYTES`.
    ChunkSize { chunk_bytes: u64 },
    /// The members are too small to hold a single stripe.
    TooSmall { member_data_bytes: u64 },
    /// The members' data space together does not fit in 64 bits of bytes (only metadata
    /// from a damaged or hostile drive claims that much).
    TooLarge { member_data_bytes: u64 },
}

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeometryError::MemberCount { level, members } => write!(
                f,
                "{level} needs {} to {MAX_MEMBERS} members, got {members}",
                level.min_members()
            ),
            GeometryError::ChunkSize { chunk_bytes } => write!(
                f,
                "chunk size {chunk_bytes} is not a power of two between {MIN_CHUNK_BYTES} and {MAX_CHUNK_BYTES}"
            ),
            GeometryError::TooSmall { member_data_bytes } => {
                write!(
                    f,
                    "members are too small ({member_data_bytes} bytes of data space each)"
                )
            }
            GeometryError::TooLarge { member_data_bytes } => {
                write!(
                    f,
                    "members are too large ({member_data_bytes} bytes of data space each)"
                )
            }
        }
    }
}

impl std::error::Error for GeometryError {}

/// The shape of a drive group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    level: Level,
    members: usize,
    chunk_bytes: u64,
    /// Usable data bytes on each member: a whole number of chunks.
    member_data_bytes: u64,
}

impl Geometry {
    /// A geometry over `members` members with `member_data_bytes` of data space each (rounded
    /// down to whole chunks).
    pub fn new(
        level: Level,
        members: usize,
        chunk_bytes: u64,
        member_data_bytes: u64,
    ) -> Result<Geometry, GeometryError> {
        if members < level.min_members() || members > MAX_MEMBERS {
            return Err(GeometryError::MemberCount { level, members });
        }
        if !chunk_bytes.is_power_of_two()
            || !(MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES).contains(&chunk_bytes)
        {
            return Err(GeometryError::ChunkSize { chunk_bytes });
        }
        let rounded = member_data_bytes / chunk_bytes * chunk_bytes;
        // Every product the geometry forms is at most this one.
        if rounded.checked_mul(members as u64).is_none() {
            return Err(GeometryError::TooLarge { member_data_bytes });
        }
        let geometry = Geometry {
            level,
            members,
            chunk_bytes,
            member_data_bytes: rounded,
        };
        if geometry.stripe_count() == 0 {
            return Err(GeometryError::TooSmall { member_data_bytes });
        }
        Ok(geometry)
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn members(&self) -> usize {
        self.members
    }

    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    pub fn member_data_bytes(&self) -> u64 {
        self.member_data_bytes
    }

    /// Data chunks per stripe.
    pub fn data_chunks(&self) -> usize {
        match self.level {
            Level::Raid0 => self.members,
            Level::Raid1 | Level::Raid10 => 1,
            Level::Raid5 => self.members - 1,
            Level::Raid6 => self.members - 2,
        }
    }

    /// Placements of each data chunk.
    pub fn copies(&self) -> usize {
        match self.level {
            Level::Raid0 | Level::Raid5 | Level::Raid6 => 1,
            Level::Raid1 => self.members,
            Level::Raid10 => 2,
        }
    }

    /// Parity chunks per stripe: 0, 1 (P) or 2 (P and Q).
    pub fn parity_chunks(&self) -> usize {
        match self.level {
            Level::Raid0 | Level::Raid1 | Level::Raid10 => 0,
            Level::Raid5 => 1,
            Level::Raid6 => 2,
        }
    }

    /// Member failures every stripe survives.
    pub fn redundancy(&self) -> usize {
        match self.level {
            Level::Raid0 => 0,
            Level::Raid1 => self.members - 1,
            Level::Raid10 => 1,
            Level::Raid5 => 1,
            Level::Raid6 => 2,
        }
    }

    /// Bytes the members write per data byte of a full-stripe write (every copy and parity).
    pub fn member_bytes_per_data_byte(&self) -> f64 {
        let data = self.data_chunks();
        (data * self.copies() + self.parity_chunks()) as f64 / data as f64
    }

    /// How many copies a read around one copy of a range can be told to avoid: mirrors number
    /// their copies; parity levels number the data chunks a range touches, at most three for
    /// a thin drive's stored block (under 4.5 KiB with its sector alignment, against a chunk of
    /// at least 4 KiB); 0 without redundancy.
    pub fn read_around_sources(&self) -> u8 {
        match (self.redundancy(), self.parity_chunks()) {
            (0, _) => 0,
            (_, 0) => self.copies() as u8,
            _ => 3,
        }
    }

    /// Data bytes of one stripe.
    pub fn stripe_data_bytes(&self) -> u64 {
        self.data_chunks() as u64 * self.chunk_bytes
    }

    /// Chunk rows on each member.
    fn rows(&self) -> u64 {
        self.member_data_bytes / self.chunk_bytes
    }

    pub fn stripe_count(&self) -> u64 {
        match self.level {
            Level::Raid10 => self.rows() * self.members as u64 / 2,
            _ => self.rows(),
        }
    }

    /// Capacity of the group's data space.
    pub fn data_bytes(&self) -> u64 {
        self.stripe_count() * self.stripe_data_bytes()
    }

    /// Stripe, data chunk index within it, and byte offset within that chunk of a group offset.
    pub fn locate(&self, offset_bytes: u64) -> (u64, usize, u64) {
        assert!(
            offset_bytes < self.data_bytes(),
            "offset {offset_bytes} beyond the group"
        );
        let stripe = offset_bytes / self.stripe_data_bytes();
        let within = offset_bytes % self.stripe_data_bytes();
        (
            stripe,
            (within / self.chunk_bytes) as usize,
            within % self.chunk_bytes,
        )
    }

    /// Group offset of the first byte of a stripe.
    pub fn stripe_offset_bytes(&self, stripe: u64) -> u64 {
        stripe * self.stripe_data_bytes()
    }

    /// Member holding P for a stripe of a parity level (md left-symmetric: parity rotates
    /// backwards from the last member).
    fn p_member(&self, stripe: u64) -> usize {
        self.members - 1 - (stripe % self.members as u64) as usize
    }

    /// Where copy `copy` of data chunk `index` of `stripe` lives.
    pub fn data_placement(&self, stripe: u64, index: usize, copy: usize) -> Placement {
        assert!(stripe < self.stripe_count());
        assert!(index < self.data_chunks());
        assert!(copy < self.copies());
        let row_offset_bytes = stripe * self.chunk_bytes;
        let n = self.members;
        match self.level {
            Level::Raid0 => Placement {
                member: index,
                offset_bytes: row_offset_bytes,
            },
            Level::Raid1 => Placement {
                member: copy,
                offset_bytes: row_offset_bytes,
            },
            Level::Raid10 => {
                let slot = stripe * 2 + copy as u64;
                Placement {
                    member: (slot % n as u64) as usize,
                    offset_bytes: slot / n as u64 * self.chunk_bytes,
                }
            }
            Level::Raid5 => Placement {
                member: (self.p_member(stripe) + 1 + index) % n,
                offset_bytes: row_offset_bytes,
            },
            Level::Raid6 => Placement {
                member: (self.p_member(stripe) + 2 + index) % n,
                offset_bytes: row_offset_bytes,
            },
        }
    }

    /// Where parity chunk `which` (0 = P, 1 = Q) of a stripe lives.
    pub fn parity_placement(&self, stripe: u64, which: usize) -> Placement {
        assert!(which < self.parity_chunks());
        let p = self.p_member(stripe);
        let member = if which == 0 {
            p
        } else {
            (p + 1) % self.members
        };
        Placement {
            member,
            offset_bytes: stripe * self.chunk_bytes,
        }
    }

    /// Chunk rows on each member.
    pub fn member_rows(&self) -> u64 {
        self.rows()
    }

    /// What the chunk at `row` of the member in `role` holds: its stripe and column, or `None`
    /// for a slot the layout leaves unused (the tail of an odd RAID10).
    pub fn column_at(&self, role: usize, row: u64) -> Option<(u64, Column)> {
        assert!(role < self.members && row < self.rows());
        match self.level {
            Level::Raid0 => Some((row, Column::Data(role))),
            Level::Raid1 => Some((row, Column::Data(0))),
            Level::Raid10 => {
                let slot = row * self.members as u64 + role as u64;
                let stripe = slot / 2;
                (stripe < self.stripe_count()).then_some((stripe, Column::Data(0)))
            }
            Level::Raid5 | Level::Raid6 => {
                let column = (0..self.parity_chunks())
                    .find(|&which| self.parity_placement(row, which).member == role)
                    .map(Column::Parity)
                    .or_else(|| {
                        (0..self.data_chunks())
                            .find(|&index| self.data_placement(row, index, 0).member == role)
                            .map(Column::Data)
                    })
                    .expect("every member holds a column of every row");
                Some((row, column))
            }
        }
    }

    /// Every placement of a stripe, data copies first then parity, with what each holds.
    pub fn stripe_columns(&self, stripe: u64) -> impl Iterator<Item = (Column, Placement)> + '_ {
        let data = (0..self.data_chunks()).flat_map(move |index| {
            (0..self.copies()).map(move |copy| {
                (
                    Column::Data(index),
                    self.data_placement(stripe, index, copy),
                )
            })
        });
        let parity = (0..self.parity_chunks())
            .map(move |which| (Column::Parity(which), self.parity_placement(stripe, which)));
        data.chain(parity)
    }

    /// Whether the group still has every stripe's data when the members marked `true` in
    /// `unavailable` are gone.
    pub fn survives(&self, unavailable: &[bool]) -> bool {
        assert_eq!(unavailable.len(), self.members);
        let lost = unavailable.iter().filter(|&&gone| gone).count();
        match self.level {
            Level::Raid0 | Level::Raid1 | Level::Raid5 | Level::Raid6 => lost <= self.redundancy(),
            Level::Raid10 => {
                // The copy pattern repeats every `members` stripes.
                let period = (self.members as u64).min(self.stripe_count());
                (0..period).all(|stripe| {
                    (0..2).any(|copy| !unavailable[self.data_placement(stripe, 0, copy).member])
                })
            }
        }
    }
}

/// What a column of a stripe holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Column {
    /// Data chunk `index` (its position among the stripe's data chunks).
    Data(usize),
    /// Parity: 0 is P, 1 is Q.
    Parity(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(level: Level, members: usize) -> Geometry {
        Geometry::new(level, members, 4096, 64 * 4096).unwrap()
    }

    /// Against the capacity the members give for the capacity the group offers.
    #[test]
    fn member_bytes_per_data_byte_is_member_capacity_over_data_capacity() {
        for level in [
            Level::Raid0,
            Level::Raid1,
            Level::Raid10,
            Level::Raid5,
            Level::Raid6,
        ] {
            for members in level.min_members()..=8 {
                let g = geometry(level, members);
                let expected =
                    (members as u64 * g.member_data_bytes()) as f64 / g.data_bytes() as f64;
                assert!(
                    (g.member_bytes_per_data_byte() - expected).abs() < 1e-9,
                    "{level:?} x{members}: {} against {expected}",
                    g.member_bytes_per_data_byte()
                );
            }
        }
    }

    /// md's raid5 left-symmetric for 4 members, written out by hand: rows are stripes, entries
    /// are what each member holds (D<j> data chunk j, P parity).
    #[test]
    fn raid5_matches_md_left_symmetric() {
        let expected = [
            ["D0", "D1", "D2", "P"],
            ["D1", "D2", "P", "D0"],
            ["D2", "P", "D0", "D1"],
            ["P", "D0", "D1", "D2"],
            ["D0", "D1", "D2", "P"],
        ];
        check_rows(&geometry(Level::Raid5, 4), &expected);
    }

    /// md's raid6 left-symmetric for 5 members, by hand: P rotates backwards from the last
    /// member, Q follows P, data chunk 0 follows Q.
    #[test]
    fn raid6_matches_md_left_symmetric() {
        let expected = [
            ["Q", "D0", "D1", "D2", "P"],
            ["D0", "D1", "D2", "P", "Q"],
            ["D1", "D2", "P", "Q", "D0"],
            ["D2", "P", "Q", "D0", "D1"],
            ["P", "Q", "D0", "D1", "D2"],
            ["Q", "D0", "D1", "D2", "P"],
        ];
        check_rows(&geometry(Level::Raid6, 5), &expected);
    }

    fn render_row(g: &Geometry, stripe: u64) -> Vec<&'static str> {
        const NAMES: [&str; 4] = ["D0", "D1", "D2", "D3"];
        let mut row = vec![""; g.members()];
        for (column, placement) in g.stripe_columns(stripe) {
            assert_eq!(placement.offset_bytes, stripe * g.chunk_bytes());
            row[placement.member] = match column {
                Column::Data(j) => NAMES[j],
                Column::Parity(0) => "P",
                Column::Parity(_) => "Q",
            };
        }
        row
    }

    fn check_rows<const N: usize>(g: &Geometry, expected: &[[&str; N]]) {
        for (stripe, row) in expected.iter().enumerate() {
            assert_eq!(
                render_row(g, stripe as u64),
                row.to_vec(),
                "stripe {stripe}"
            );
        }
    }

    #[test]
    fn raid10_near2_odd_members_matches_md() {
        // md near-2 over 3 members: chunk copies fill slots row by row.
        // row 0: C0 C0 C1 / row 1: C1 C2 C2 / row 2: C3 C3 C4 ...
        let g = geometry(Level::Raid10, 3);
        let expect = [
            (0, [(0, 0), (1, 0)]),
            (1, [(2, 0), (0, 1)]),
            (2, [(1, 1), (2, 1)]),
            (3, [(0, 2), (1, 2)]),
        ];
        for (chunk, copies) in expect {
            for (copy, (member, row)) in copies.into_iter().enumerate() {
                assert_eq!(
                    g.data_placement(chunk, 0, copy),
                    Placement {
                        member,
                        offset_bytes: row * 4096
                    },
                    "chunk {chunk} copy {copy}"
                );
            }
        }
        assert_eq!(g.stripe_count(), 64 * 3 / 2);
    }

    #[test]
    fn capacities() {
        let m = 64 * 4096;
        assert_eq!(geometry(Level::Raid0, 4).data_bytes(), 4 * m);
        assert_eq!(geometry(Level::Raid1, 3).data_bytes(), m);
        assert_eq!(geometry(Level::Raid10, 4).data_bytes(), 2 * m);
        assert_eq!(geometry(Level::Raid5, 5).data_bytes(), 4 * m);
        assert_eq!(geometry(Level::Raid6, 6).data_bytes(), 4 * m);
    }

    /// Every member byte is used by at most one (stripe, column) and every stripe's columns are
    /// on distinct members.
    #[test]
    fn placements_never_collide() {
        for level in [
            Level::Raid0,
            Level::Raid1,
            Level::Raid10,
            Level::Raid5,
            Level::Raid6,
        ] {
            for members in level.min_members()..=9 {
                let g = geometry(level, members);
                let mut seen = std::collections::HashSet::new();
                for stripe in 0..g.stripe_count() {
                    let mut members_used = std::collections::HashSet::new();
                    for (_, placement) in g.stripe_columns(stripe) {
                        assert!(placement.offset_bytes < g.member_data_bytes());
                        assert!(
                            seen.insert(placement),
                            "{level} x{members}: {placement:?} reused"
                        );
                        assert!(members_used.insert(placement.member));
                    }
                }
            }
        }
    }

    /// `column_at` is the inverse of the placement functions.
    #[test]
    fn column_at_inverts_placement() {
        for level in [
            Level::Raid0,
            Level::Raid1,
            Level::Raid10,
            Level::Raid5,
            Level::Raid6,
        ] {
            for members in level.min_members()..=7 {
                let g = geometry(level, members);
                for stripe in 0..g.stripe_count() {
                    for (column, placement) in g.stripe_columns(stripe) {
                        let row = placement.offset_bytes / g.chunk_bytes();
                        assert_eq!(
                            g.column_at(placement.member, row),
                            Some((stripe, column)),
                            "{level} x{members}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn survival() {
        let g = geometry(Level::Raid10, 4);
        assert!(g.survives(&[true, false, true, false]));
        assert!(!g.survives(&[true, true, false, false]));
        let g = geometry(Level::Raid10, 3);
        assert!(g.survives(&[false, true, false]));
        assert!(!g.survives(&[true, false, true]));
        let g = geometry(Level::Raid6, 5);
        assert!(g.survives(&[true, false, true, false, false]));
        assert!(!g.survives(&[true, true, true, false, false]));
        let g = geometry(Level::Raid0, 2);
        assert!(!g.survives(&[false, true]));
    }

    #[test]
    fn refusals() {
        assert!(matches!(
            Geometry::new(Level::Raid6, 3, 4096, 1 << 20),
            Err(GeometryError::MemberCount { .. })
        ));
        assert!(matches!(
            Geometry::new(Level::Raid5, 4, 3000, 1 << 20),
            Err(GeometryError::ChunkSize { .. })
        ));
        assert!(matches!(
            Geometry::new(Level::Raid5, 4, 1 << 21, 1 << 30),
            Err(GeometryError::ChunkSize { .. })
        ));
        assert!(matches!(
            Geometry::new(Level::Raid5, 4, 4096, 100),
            Err(GeometryError::TooSmall { .. })
        ));
    }
}
