//! Everything a run does is chosen from its seed.

use crate::prng::Rng;
use tessera_raid::geometry::Level;
use tessera_raid::superblock::JournalMode;

/// How faults are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultMode {
    /// Faults stay within what the group must survive: every check is exact.
    MustSurvive,
    /// Faults go beyond the redundancy: requests may fail, but nothing may return wrong data.
    BeyondTolerance,
}

/// The shape of one simulated run.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub level: Level,
    pub members: usize,
    pub chunk_bytes: u64,
    pub member_bytes: u64,
    pub region_bytes: u64,
    pub pool_bytes: usize,
    pub coalesce_window_us: u64,
    pub dirty_clear_delay_us: u64,
    pub rebuild_window: usize,
    /// Host requests in flight, unless `deep_queue` replaces it.
    pub queue_depth: usize,
    /// One run in eight keeps a deep host queue and a larger journal.
    pub deep_queue: Option<DeepQueue>,
    pub host_ops: u64,
    /// The part of the group's data space the workload touches (bytes from the start).
    pub working_bytes: u64,
    pub max_request_bytes: u64,
    pub mode: FaultMode,
    /// Per-million chances per host op of each fault.
    pub crash_rate: u64,
    pub member_loss_rate: u64,
    pub write_failure_rate: u64,
    pub latent_error_rate: u64,
    pub bit_flip_rate: u64,
    pub admin_fail_rate: u64,
    pub restart_rate: u64,
    /// Per-million chance per host op of starting a scrub (check or repair).
    pub scrub_rate: u64,
    /// Rebuild rate percent (pacing against host I/O) and a latency target (0: none).
    pub rebuild_rate_percent: u8,
    pub rebuild_latency_target_us: u32,
    /// Long-tail member latency (per million commands).
    pub slow_command_rate: u64,
    pub journal_mode: JournalMode,
    /// Per-million chance that a crash also takes members away before the group is assembled
    /// again (within tolerance only while the journal covers every stripe update).
    pub crash_loss_chance: u64,
    /// The engine hands full-stripe parity work out (`Command::Compute`); the world carries it
    /// out after a random delay, as a GPU batch would complete.
    pub offload_parity: bool,
    /// The host talks to a thin virtual drive over the whole group instead of to the group
    /// (off unless `TESSERA_SIM_THIN=on`, so that every seed keeps the run it always had).
    pub thin: bool,
    /// Member commands due at the same moment complete together (`Engine::complete_all`),
    /// as the daemon hands over what it reaped from its ring, and the host requests of one
    /// refill of the queue are submitted together (`Engine::submit_all`).
    pub batch_events: bool,
}

impl Config {
    pub fn from_seed(seed: u64) -> Config {
        let mut rng = Rng::new(seed);
        let level = *rng.pick(&[
            Level::Raid0,
            Level::Raid1,
            Level::Raid10,
            Level::Raid5,
            Level::Raid5,
            Level::Raid6,
            Level::Raid6,
        ]);
        let members = rng.between(level.min_members() as u64, 7) as usize;
        let chunk_bytes = *rng.pick(&[4096u64, 8192, 16384, 65536]);
        let member_bytes = rng.between(4, 10) << 20;
        let stripe_data = chunk_bytes * data_chunks(level, members);
        let region_bytes = stripe_data * rng.between(1, 8);
        let mode = if rng.chance(150_000) {
            FaultMode::BeyondTolerance
        } else {
            FaultMode::MustSurvive
        };
        let faults = rng.chance(850_000);
        let rate = |rng: &mut Rng, max: u64| if faults { rng.below(max + 1) } else { 0 };
        let mut config = Config {
            seed,
            level,
            members,
            chunk_bytes,
            member_bytes,
            region_bytes,
            pool_bytes: *rng.pick(&[6usize << 20, 16 << 20, 64 << 20]),
            coalesce_window_us: *rng.pick(&[0u64, 50, 500]),
            dirty_clear_delay_us: *rng.pick(&[1_000u64, 20_000, 200_000]),
            rebuild_window: rng.between(1, 4) as usize,
            queue_depth: rng.between(1, 24) as usize,
            deep_queue: None,
            host_ops: rng.between(300, 1200),
            working_bytes: rng.between(1, 4) << 20,
            max_request_bytes: *rng.pick(&[4096u64, 65536, 256 << 10]),
            mode,
            crash_rate: rate(&mut rng, 4_000),
            member_loss_rate: rate(&mut rng, 3_000),
            write_failure_rate: rate(&mut rng, 1_500),
            latent_error_rate: rate(&mut rng, 10_000),
            bit_flip_rate: rate(&mut rng, 3_000),
            admin_fail_rate: rate(&mut rng, 1_500),
            restart_rate: rate(&mut rng, 2_000),
            slow_command_rate: rng.below(20_000),
            scrub_rate: rng.below(3_000),
            rebuild_rate_percent: *rng.pick(&[100u8, 30, 5]),
            rebuild_latency_target_us: *rng.pick(&[0u32, 0, 500]),
            journal_mode: *rng.pick(&[
                JournalMode::AlwaysOn,
                JournalMode::AlwaysOn,
                JournalMode::DegradeOnly,
                JournalMode::AlwaysOff,
            ]),
            crash_loss_chance: *rng.pick(&[0u64, 300_000, 700_000]),
            // Drawn last, so that every other field of a seed stays what it was before.
            offload_parity: rng.chance(500_000),
            thin: false,
            // Drawn after the parity offload, for the same reason.
            batch_events: rng.chance(500_000),
        };
        // Drawn after the batched events, for the same reason. A host such as fio at QD128
        // keeps far more requests waiting than 24: journal batches, stripe waits and the
        // buffer pool then reach sizes the shallow queues never do. A journal larger than the
        // small members' default lets its batches grow as they do on real drives.
        if rng.chance(DEEP_QUEUE_CHANCE) {
            config.deep_queue = Some(DeepQueue {
                depth: rng.between(DEEP_QUEUE_MIN, DEEP_QUEUE_MAX) as usize,
                journal_bytes: *rng.pick(&[1u64 << 20, 2 << 20]),
            });
        }
        config.with_overrides()
    }

    /// `TESSERA_SIM_JOURNAL=always_on|degrade_only|always_off` replaces the seed's journal mode
    /// and `TESSERA_SIM_OFFLOAD=on|off` its parity offload (to tell whether a failure depends on
    /// them); `TESSERA_SIM_THIN=on` runs the seed's workload on a thin drive;
    /// `TESSERA_SIM_QUEUE_DEPTH=N` keeps N host requests in flight.
    fn with_overrides(mut self) -> Config {
        if let Ok(depth) = std::env::var("TESSERA_SIM_QUEUE_DEPTH") {
            let depth = match depth.parse::<usize>() {
                Ok(depth) if depth > 0 => depth,
                _ => panic!("TESSERA_SIM_QUEUE_DEPTH={depth}: not a positive number"),
            };
            self.queue_depth = depth;
            if let Some(deep) = &mut self.deep_queue {
                deep.depth = depth;
            }
        }
        if let Ok(thin) = std::env::var("TESSERA_SIM_THIN") {
            let thin = match thin.as_str() {
                "1" | "on" => true,
                "0" | "off" => false,
                other => panic!("TESSERA_SIM_THIN={other}: not on or off"),
            };
            self = self.with_thin(thin);
        }
        if let Ok(offload) = std::env::var("TESSERA_SIM_OFFLOAD") {
            self.offload_parity = match offload.as_str() {
                "1" | "on" => true,
                "0" | "off" => false,
                other => panic!("TESSERA_SIM_OFFLOAD={other}: not on or off"),
            };
        }
        if let Ok(mode) = std::env::var("TESSERA_SIM_JOURNAL") {
            self.journal_mode = match mode.as_str() {
                "always_on" => JournalMode::AlwaysOn,
                "degrade_only" => JournalMode::DegradeOnly,
                "always_off" => JournalMode::AlwaysOff,
                other => panic!("TESSERA_SIM_JOURNAL={other}: not a journal mode"),
            };
        }
        self
    }
}

/// A deep host queue, as fio at QD128 keeps, and a journal area large enough for the batches
/// such a queue makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeepQueue {
    pub depth: usize,
    pub journal_bytes: u64,
}

impl Config {
    /// Host requests kept in flight.
    pub fn host_queue_depth(&self) -> usize {
        self.deep_queue.map_or(self.queue_depth, |deep| deep.depth)
    }

    /// Each member's journal area (`None`: the default for the member size).
    pub fn journal_bytes(&self) -> Option<u64> {
        self.deep_queue.map(|deep| deep.journal_bytes)
    }

    /// The seed as it was drawn before the deep-queue draw existed: the regression seeds
    /// found then keep the run that found their bug.
    pub fn shallow(mut self) -> Config {
        self.deep_queue = None;
        self
    }

    /// The same seed with the host on a thin drive (or not). A thin drive needs eight segments
    /// of about 1 MiB and its checkpoint slots, so members grow until the group's data space
    /// holds at least `THIN_DATA_BYTES`.
    pub fn with_thin(mut self, thin: bool) -> Config {
        self.thin = thin;
        if thin {
            let share = match self.level {
                Level::Raid0 => self.members as u64,
                Level::Raid1 => 1,
                Level::Raid10 => (self.members as u64 / 2).max(1),
                Level::Raid5 => self.members as u64 - 1,
                Level::Raid6 => self.members as u64 - 2,
            };
            // Superblocks, bitmap and the journal's area come on top of the data space.
            let wanted = THIN_DATA_BYTES.div_ceil(share) + (4 << 20);
            self.member_bytes = self.member_bytes.max(wanted.next_multiple_of(1 << 20));
        }
        self
    }
}

/// Per-million chance that a run keeps a deep host queue, and how deep it then is.
const DEEP_QUEUE_CHANCE: u64 = 125_000;
const DEEP_QUEUE_MIN: u64 = 32;
const DEEP_QUEUE_MAX: u64 = 128;

/// The least data space a thin run's group gets.
pub const THIN_DATA_BYTES: u64 = 16 << 20;

fn data_chunks(level: Level, members: usize) -> u64 {
    match level {
        Level::Raid0 => members as u64,
        Level::Raid1 | Level::Raid10 => 1,
        Level::Raid5 => members as u64 - 1,
        Level::Raid6 => members as u64 - 2,
    }
}
