//! The member table: who holds which role, who may be read and written where.

use super::types::{FailReason, GroupState};
use crate::geometry::Geometry;
use crate::superblock::{MemberRecord, MemberRecordState, Uuid};

/// A list of member indexes, inline for groups of up to 16 members.
pub(crate) type MemberList = smallvec::SmallVec<[usize; 16]>;

/// The engine's view of one member device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub uuid: Uuid,
    pub size_bytes: u64,
    pub role: Option<usize>,
    pub state: MemberState,
    /// A rebuilding member replacing a live one (proactive replace).
    pub replacing: bool,
    /// Member commands in flight, for read balancing.
    pub in_flight: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemberState {
    Active,
    /// In sync below `position_bytes` of its data area.
    Rebuilding {
        position_bytes: u64,
    },
    Failed(FailReason),
    Spare,
    /// The dedicated journal device: no role, no data, the journal's ring.
    Journal,
}

impl Member {
    pub(crate) fn from_record(record: &MemberRecord, present: bool) -> Member {
        let state = match record.state {
            _ if !present => MemberState::Failed(FailReason::Missing),
            MemberRecordState::Active => MemberState::Active,
            MemberRecordState::Rebuilding => MemberState::Rebuilding {
                position_bytes: record.rebuild_position_bytes,
            },
            MemberRecordState::Failed => MemberState::Failed(FailReason::Missing),
            MemberRecordState::Spare => MemberState::Spare,
            MemberRecordState::Journal => MemberState::Journal,
        };
        Member {
            uuid: record.uuid,
            size_bytes: record.size_bytes,
            role: record.role.map(usize::from),
            state,
            replacing: record.replacing,
            in_flight: 0,
        }
    }

    pub(crate) fn record(&self) -> MemberRecord {
        let (state, rebuild_position_bytes) = match self.state {
            MemberState::Active => (MemberRecordState::Active, 0),
            MemberState::Rebuilding { position_bytes } => {
                (MemberRecordState::Rebuilding, position_bytes)
            }
            MemberState::Failed(_) => (MemberRecordState::Failed, 0),
            MemberState::Spare => (MemberRecordState::Spare, 0),
            MemberState::Journal => (MemberRecordState::Journal, 0),
        };
        MemberRecord {
            uuid: self.uuid,
            size_bytes: self.size_bytes,
            role: self
                .role
                .map(|role| u8::try_from(role).expect("role fits u8")),
            state,
            rebuild_position_bytes,
            replacing: self.replacing,
        }
    }

    /// A failed member that no longer holds a role: left out of the superblock.
    pub(crate) fn is_retired(&self) -> bool {
        self.is_failed() && self.role.is_none()
    }

    pub(crate) fn is_failed(&self) -> bool {
        matches!(self.state, MemberState::Failed(_))
    }

    /// Whether the member carries the group's metadata (superblock, bitmap).
    pub(crate) fn carries_metadata(&self) -> bool {
        !self.is_failed()
    }

    /// Whether its data at member offset `offset_bytes` is in sync, given the chunk rows a
    /// rebuild finished ahead of its position.
    fn in_sync_at(&self, index: usize, offset_bytes: u64, ahead: &RebuiltAhead) -> bool {
        match self.state {
            MemberState::Active => true,
            MemberState::Rebuilding { position_bytes } => {
                offset_bytes < position_bytes
                    || (ahead.member == Some(index)
                        && ahead.rows.contains(&(offset_bytes / ahead.chunk_bytes)))
            }
            MemberState::Failed(_) | MemberState::Spare | MemberState::Journal => false,
        }
    }
}

/// Chunk rows of the rebuilding member that are rebuilt but lie above its contiguous
/// position (rebuild runs several rows at once, so they finish out of order).
#[derive(Default)]
pub(crate) struct RebuiltAhead {
    /// The member being rebuilt (other rebuilding members wait their turn at their position).
    pub member: Option<usize>,
    pub chunk_bytes: u64,
    pub rows: std::collections::BTreeSet<u64>,
}

/// The member table with the queries the I/O paths need.
pub(crate) struct Members {
    pub list: Vec<Member>,
    pub ahead: RebuiltAhead,
    /// Bytes of each member's data area: a rebuild position at its end is a member in sync.
    pub data_bytes: u64,
}

impl Members {
    /// The member to read `role`'s chunk at member offset `offset_bytes` from, preferring an
    /// active member over one being rebuilt.
    pub(crate) fn reader(&self, role: usize, offset_bytes: u64) -> Option<usize> {
        let mut fallback = None;
        for (index, member) in self.list.iter().enumerate() {
            if member.role != Some(role) || !member.in_sync_at(index, offset_bytes, &self.ahead) {
                continue;
            }
            if member.state == MemberState::Active {
                return Some(index);
            }
            fallback.get_or_insert(index);
        }
        fallback
    }

    /// Every member that must receive a write of `role`'s chunk at `offset_bytes`: the active
    /// holder and a member being rebuilt into the role below its position.
    pub(crate) fn writers(
        &self,
        role: usize,
        offset_bytes: u64,
    ) -> impl Iterator<Item = usize> + '_ {
        self.list
            .iter()
            .enumerate()
            .filter(move |(index, member)| {
                member.role == Some(role) && member.in_sync_at(*index, offset_bytes, &self.ahead)
            })
            .map(|(index, _)| index)
    }

    /// Whether some member holds `role` actively.
    pub(crate) fn role_active(&self, role: usize) -> bool {
        self.list
            .iter()
            .any(|member| member.role == Some(role) && member.state == MemberState::Active)
    }

    /// Roles that no member holds in sync everywhere: neither an active member nor one whose
    /// rebuild reached the end (recorded, but not yet declared active when a crash came).
    pub(crate) fn unavailable_roles(&self, roles: usize) -> Vec<bool> {
        (0..roles)
            .map(|role| {
                !self.list.iter().any(|member| {
                    member.role == Some(role)
                        && match member.state {
                            MemberState::Active => true,
                            MemberState::Rebuilding { position_bytes } => {
                                position_bytes >= self.data_bytes
                            }
                            MemberState::Failed(_) | MemberState::Spare | MemberState::Journal => {
                                false
                            }
                        }
                })
            })
            .collect()
    }

    /// Members carrying metadata (superblock and bitmap copies).
    pub(crate) fn metadata_members(&self) -> Vec<usize> {
        (0..self.list.len())
            .filter(|&index| self.list[index].carries_metadata())
            .collect()
    }

    /// Members holding data that flushes must reach.
    pub(crate) fn data_members(&self) -> MemberList {
        (0..self.list.len())
            .filter(|&index| {
                matches!(
                    self.list[index].state,
                    MemberState::Active | MemberState::Rebuilding { .. }
                )
            })
            .collect()
    }

    /// The dedicated journal device, while it works.
    pub(crate) fn journal_device(&self) -> Option<usize> {
        self.list
            .iter()
            .position(|member| member.state == MemberState::Journal)
    }

    /// The rebuilding member, if one is being rebuilt.
    pub(crate) fn rebuilding(&self) -> Option<usize> {
        self.list
            .iter()
            .position(|member| matches!(member.state, MemberState::Rebuilding { .. }))
    }

    /// The state operators see, from member health alone (resync is layered on top).
    pub(crate) fn group_state(&self, geometry: &Geometry) -> GroupState {
        // The common case, asked on every event: every role held by an active member and no
        // rebuild. Decided without allocating.
        let roles = geometry.members();
        if roles <= 64 {
            let mut active = 0u64;
            let mut rebuilding = false;
            for member in &self.list {
                match (member.state, member.role) {
                    (MemberState::Active, Some(role)) => active |= 1 << role,
                    (MemberState::Rebuilding { .. }, _) => rebuilding = true,
                    _ => {}
                }
            }
            let all = if roles == 64 {
                u64::MAX
            } else {
                (1 << roles) - 1
            };
            if active == all && !rebuilding {
                return GroupState::Optimal;
            }
        }
        let unavailable = self.unavailable_roles(geometry.members());
        if !geometry.survives(&unavailable) {
            GroupState::Failed
        } else if self.rebuilding().is_some() {
            GroupState::Rebuilding
        } else if unavailable.iter().any(|&gone| gone) {
            GroupState::Degraded
        } else {
            GroupState::Optimal
        }
    }
}
