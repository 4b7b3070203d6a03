//! Every fuzz target, on stable Rust, over its committed inputs: the seeds and what fuzzing
//! found (`fuzz/corpus/<target>/`), every crash input ever found (`fuzz/regressions/<target>/`),
//! and a few hundred seeded random mutations of each corpus file. This is how the normal test
//! command runs each target briefly; `cargo xtask fuzz` runs them for real (docs/fuzzing.md).
//!
//! `TESSERA_FUZZ_MUTATIONS=N` changes the mutations per file (default 200); a failing mutation
//! is written to the system temporary directory and named in the failure, ready to be moved to
//! `fuzz/regressions/<target>/`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use tessera_fuzz_replay::{TARGETS, Target, target};

const DEFAULT_MUTATIONS: u32 = 200;
/// Mutations stacked on one another for one case, at most.
const STACKED_MUTATIONS_MAX: u64 = 4;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of a directory, sorted by name (an absent directory has none).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.is_file() && !is_documentation(path))
        .collect();
    files.sort();
    files
}

fn is_documentation(path: &Path) -> bool {
    path.extension().is_some_and(|extension| extension == "md")
}

fn mutations_per_file() -> u32 {
    std::env::var("TESSERA_FUZZ_MUTATIONS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(DEFAULT_MUTATIONS)
}

/// Runs one input; returns the panic message if the target panicked.
fn run(target: Target, input: &[u8]) -> Option<String> {
    catch_unwind(AssertUnwindSafe(|| (target.run)(input)))
        .err()
        .map(|payload| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
                .unwrap_or_else(|| "a panic".to_string())
        })
}

fn replay(name: &str) {
    let target = target(name).expect("a target of that name");
    let corpus = files(&fuzz_dir().join("corpus").join(name));
    let regressions = files(&fuzz_dir().join("regressions").join(name));
    assert!(
        !corpus.is_empty(),
        "{name} has no committed corpus in fuzz/corpus/{name}"
    );
    let mut failures = Vec::new();
    let inputs: Vec<(PathBuf, Vec<u8>)> = corpus
        .iter()
        .chain(&regressions)
        .map(|path| (path.clone(), std::fs::read(path).expect("readable input")))
        .collect();
    for (path, input) in &inputs {
        if let Some(message) = run(target, input) {
            failures.push(format!("{}: {message}", path.display()));
        }
    }
    let mut rng = Rng::new(0x7e55_e7a0 ^ name.len() as u64);
    let corpus_inputs = &inputs[..corpus.len()];
    for (path, input) in corpus_inputs {
        for case in 0..mutations_per_file() {
            let other = &corpus_inputs[rng.below(corpus_inputs.len() as u64) as usize].1;
            let mutated = mutate(&mut rng, input, other);
            if let Some(message) = run(target, &mutated) {
                let saved = std::env::temp_dir().join(format!(
                    "tessera-fuzz-{name}-{}-{case}",
                    path.file_name().expect("file name").to_string_lossy()
                ));
                std::fs::write(&saved, &mutated).expect("save the failing input");
                failures.push(format!(
                    "mutation {case} of {}: {message} (input saved as {})",
                    path.display(),
                    saved.display()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} inputs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// One test per target, so they run in parallel.
macro_rules! replay_tests {
    ($($target:ident),* $(,)?) => {
        const REPLAYED: &[&str] = &[$(stringify!($target)),*];
        $(
            #[test]
            fn $target() {
                replay(stringify!($target));
            }
        )*
    };
}

replay_tests!(
    nbd_server_handshake,
    nbd_requests,
    nbd_client_replies,
    superblock,
    md_superblock,
    bitmap_block,
    journal_batch,
    engine_assemble,
    thin_log_replay,
    api_http,
    api_router,
);

#[test]
fn every_target_is_replayed_and_has_a_fuzz_binary() {
    let mut library: Vec<&str> = TARGETS.iter().map(|target| target.name).collect();
    library.sort_unstable();
    let mut replayed = REPLAYED.to_vec();
    replayed.sort_unstable();
    assert_eq!(replayed, library, "replay_tests! must list every target");
    let mut binaries: Vec<String> = files(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .map(|path| {
            path.file_stem()
                .expect("file stem")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    binaries.sort_unstable();
    assert_eq!(
        binaries, library,
        "fuzz/fuzz_targets must hold one binary per target"
    );
    let cargo_toml =
        std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for name in library {
        assert!(
            cargo_toml.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] for {name}"
        );
    }
}

/// xorshift64*: a small seeded generator, so every run mutates the same way.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..bound` (`bound` > 0).
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// Values that sit on boundaries of lengths, counts and flags.
const INTERESTING: [u64; 10] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x1000,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 25,
    u64::MAX,
];

/// `input` with 1 to 4 random edits: bit flips, boundary values (either byte order), inserted,
/// deleted or duplicated bytes, truncation, or a splice with `other`.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut bytes = input.to_vec();
    for _ in 0..=rng.below(STACKED_MUTATIONS_MAX) {
        let len = bytes.len() as u64;
        let at = if len == 0 { 0 } else { rng.below(len) } as usize;
        match rng.below(8) {
            0 if len > 0 => bytes[at] ^= 1 << rng.below(8),
            1 if len > 0 => bytes[at] = rng.next() as u8,
            2 => {
                let value = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
                let width = [1usize, 2, 4, 8][rng.below(4) as usize];
                let encoded = if rng.below(2) == 0 {
                    value.to_le_bytes()
                } else {
                    value.to_be_bytes()
                };
                let window = if rng.below(2) == 0 {
                    &encoded[..width]
                } else {
                    &encoded[8 - width..]
                };
                let end = (at + width).min(bytes.len());
                bytes[at..end].copy_from_slice(&window[..end - at]);
            }
            3 => {
                let count = 1 + rng.below(16) as usize;
                let inserted: Vec<u8> = (0..count).map(|_| rng.next() as u8).collect();
                bytes.splice(at..at, inserted);
            }
            4 if len > 0 => {
                let end = (at + 1 + rng.below(64) as usize).min(bytes.len());
                bytes.drain(at..end);
            }
            5 if len > 0 => bytes.truncate(at),
            6 if len > 0 => {
                let end = (at + 1 + rng.below(64) as usize).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                let to = rng.below(len) as usize;
                bytes.splice(to..to, copy);
            }
            _ if !other.is_empty() => {
                let from = rng.below(other.len() as u64) as usize;
                bytes.truncate(at);
                bytes.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    bytes
}
