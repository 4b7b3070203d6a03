#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera_fuzz_replay::metadata::md_superblock(data));
