//! The thin virtual drive of a thin run (`Config::thin`): a thin store laid over the group's
//! whole data space. The host's requests go to the store and the store's lower commands
//! become the group's host requests, so crashes, member losses, rebuilds and scrubs of the
//! group happen under a thin drive, and the reference model checks what the drive returns.

use crate::prng::Rng;
use std::collections::{BTreeMap, VecDeque};
use tessera_buffer::BufferId;
use tessera_raid::engine::{Engine, HostError, HostOp, HostRequest};
use tessera_thin::layout::Layout;
use tessera_thin::{Compression, Config, LowerCommand, LowerOp, Store};

/// A store's lower command the group is working on.
struct LowerInFlight {
    lower_id: u64,
    /// For reads, how many bytes of the reply's buffer are the data.
    read_bytes: usize,
}

pub(crate) struct ThinDrive {
    config: Config,
    /// `None` from a crash or clean stop until the group is assembled again.
    pub store: Option<Store>,
    /// Group request id -> the store's command it carries.
    lower: BTreeMap<u64, LowerInFlight>,
    /// The store's commands in issue order, waiting for pool space for their data; the group
    /// takes them strictly in order, since the store counts on a trim going before whatever
    /// it issued after it.
    backlog: VecDeque<LowerCommand>,
}

impl ThinDrive {
    /// A drive over the whole data space of `engine`'s group, newly formatted.
    pub fn create(engine: &Engine, logical_bytes: u64, rng: &mut Rng) -> Result<ThinDrive, String> {
        let geometry = engine.geometry();
        let config = Config {
            store_id: rng.next_u64() | 1,
            logical_bytes,
            extent_bytes: engine.data_bytes(),
            stripe_bytes: geometry.stripe_data_bytes(),
            compression: *rng.pick(&[Compression::Lz4, Compression::Zstd, Compression::None]),
            repair_sources: geometry.read_around_sources(),
            member_bytes_per_data_byte: geometry.member_bytes_per_data_byte(),
            low_space_percent: 10,
            // Counted up at every start-up (`open`): distinct, and no draw from the seed's
            // random numbers.
            session_id: 1,
        };
        let store = Store::create(config.clone())?;
        Ok(ThinDrive {
            config,
            store: Some(store),
            lower: BTreeMap::new(),
            backlog: VecDeque::new(),
        })
    }

    /// The physical space a drive over the whole data space of `engine`'s group has.
    pub fn physical_bytes(engine: &Engine) -> Result<u64, String> {
        let layout = Layout::new(engine.data_bytes(), engine.geometry().stripe_data_bytes())?;
        Ok(layout.data_bytes())
    }

    /// The group vanished (crash) or stopped: the store goes with it.
    pub fn lose_store(&mut self) {
        self.store = None;
        self.lower.clear();
        self.backlog.clear();
    }

    /// Starts the store again from what the group holds (it reads its checkpoint and log).
    pub fn open(&mut self) -> Result<(), String> {
        assert!(self.store.is_none() && self.lower.is_empty());
        self.config.session_id += 1;
        self.store = Some(Store::open(self.config.clone())?);
        Ok(())
    }

    pub fn queue_lower(&mut self, command: LowerCommand) {
        self.backlog.push_back(command);
    }

    /// Nothing of the store's is queued or at the group, and no record waits to be sealed.
    pub fn is_idle(&self) -> bool {
        self.lower.is_empty()
            && self.backlog.is_empty()
            && self
                .store
                .as_ref()
                .is_none_or(|store| store.next_deadline_us().is_none())
    }

    /// Hands queued commands to the engine in order, until one finds no pool space for its
    /// data; how many went.
    pub fn send(&mut self, engine: &mut Engine, next_request_id: &mut u64) -> usize {
        let mut sent = 0;
        while let Some(command) = self.backlog.front() {
            let mut read_bytes = 0;
            let op = match &command.op {
                LowerOp::Read {
                    offset_bytes,
                    len_bytes,
                } => {
                    read_bytes = *len_bytes as usize;
                    HostOp::Read {
                        offset_bytes: *offset_bytes,
                        len_bytes: *len_bytes,
                    }
                }
                LowerOp::ReadAround {
                    offset_bytes,
                    len_bytes,
                    copy,
                } => {
                    read_bytes = *len_bytes as usize;
                    HostOp::ReadAround {
                        offset_bytes: *offset_bytes,
                        len_bytes: *len_bytes,
                        copy: *copy,
                    }
                }
                LowerOp::Write { offset_bytes, data } => {
                    let Some(buffer) = engine.alloc_host_buffer(data.len()) else {
                        break;
                    };
                    engine.pool_mut().slice_mut(buffer)[..data.len()].copy_from_slice(data);
                    HostOp::Write {
                        offset_bytes: *offset_bytes,
                        buffer,
                        fua: false,
                    }
                }
                LowerOp::Flush => HostOp::Flush,
                LowerOp::Trim {
                    offset_bytes,
                    len_bytes,
                } => HostOp::Trim {
                    offset_bytes: *offset_bytes,
                    len_bytes: *len_bytes,
                },
            };
            let command = self.backlog.pop_front().expect("front");
            let id = *next_request_id;
            *next_request_id += 1;
            self.lower.insert(
                id,
                LowerInFlight {
                    lower_id: command.id,
                    read_bytes,
                },
            );
            engine.submit(HostRequest { id, op });
            sent += 1;
        }
        sent
    }

    /// The group answered request `id`; false if it was not one of the store's.
    pub fn lower_reply(
        &mut self,
        engine: &mut Engine,
        id: u64,
        result: Result<Option<BufferId>, HostError>,
    ) -> bool {
        let Some(lower) = self.lower.remove(&id) else {
            return false;
        };
        let store = self.store.as_mut().expect("a store issued the command");
        let result = match result {
            Ok(Some(buffer)) => {
                let mut data = store.spare_buffer();
                data.extend_from_slice(&engine.pool().slice(buffer)[..lower.read_bytes]);
                engine.pool_mut().free(buffer);
                Ok(Some(data))
            }
            Ok(None) => Ok(None),
            Err(_) => Err(()),
        };
        store.lower_done(lower.lower_id, result);
        true
    }
}
