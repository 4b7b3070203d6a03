#!/usr/bin/env bash
# Every test: formatting, lints, and the whole test suite (unit, parity kernels against the
# naive reference, simulator seeds, NBD codec against real clients, daemon end to end with fio,
# qemu-img, nbdcopy and ext4). Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
./scripts/setup.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
# The VM tests include the tessera binary this very build makes (tessera-cli's integration tests
# need it). Left to themselves they ask cargo for it again (`cargo test --workspace --no-run`,
# nothing to do here but a freshness check); named, they take it as it is.
export TESSERA_VM_BINARY="${TESSERA_VM_BINARY:-${CARGO_TARGET_DIR:-$PWD/target}/debug/tessera}"
cargo test --workspace --locked
echo "== benchmark runner unit tests"
python3 -m unittest discover -s bench/tests
echo "== all tests passed in $(( $(date +%s) - started )) s"
