#!/usr/bin/env python3
"""The end-to-end benchmark suite: fio over NBD against Tessera virtual drives, beside the
baseline, the transport ceiling and btrfs. Usually started by `cargo xtask bench` (which builds
tessera and the plotting venv first); `python3 bench/run.py --help` lists the options, and
docs/benchmarks.md describes the method."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runner.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
