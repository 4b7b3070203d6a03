# Shortcuts only: the commands themselves are documented in README.md and docs/.
# `make bench ARGS="--targets raid5,baseline"` passes options to the benchmark runner.
.PHONY: bench bench-quick demo test

bench:
	cargo xtask bench $(ARGS)

bench-quick:
	cargo xtask bench --quick $(ARGS)

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh
