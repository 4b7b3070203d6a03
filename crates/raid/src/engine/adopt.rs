//! Adopting data already on the members (an md array): a new group whose data area is given
//! and already holds data, so every region starts written and in sync.

use super::{Engine, EngineConfig};
use crate::engine::meta::{AssembleError, CreateSpec};
use crate::layout::MemberLayout;
use std::sync::Arc;
use tessera_parity::Kernel;

impl Engine {
    /// A new group over `layout` (from `layout::adopted_layout`) whose data area already holds
    /// the data: the bitmap is formatted with every region written and none dirty, so reads
    /// return what is on the members and a rebuild copies everything. Members of
    /// `missing_roles` are recorded failed (their uuids and sizes in `spec` are placeholders).
    pub fn adopt(
        spec: CreateSpec,
        layout: MemberLayout,
        missing_roles: &[usize],
        config: EngineConfig,
        parity: Arc<dyn Kernel>,
    ) -> Result<Engine, AssembleError> {
        assert!(
            spec.journal_device.is_none(),
            "an adopted group has no journal device"
        );
        Engine::create_with_layout(spec, layout, missing_roles, true, config, parity)
    }
}
