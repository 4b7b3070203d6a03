#!/usr/bin/env python3
"""The end-to-end benchmark suite: fio over NBD against Tessera virtual drives, beside the
baseline, the transport ceiling and btrfs. Usually started by `cargo xtask bench` (which builds
tessera and the plotting venv first); `python3 bench/run.py --help` lists the options, and
docs/benchmarks.md describes the method. `python3 bench/run.py rebuild` (`cargo xtask bench
rebuild`) runs the rebuild benchmarks instead, `python3 bench/run.py scaling` the scaling ones."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runner import main as suite  # noqa: E402
from runner import rebuild, scaling  # noqa: E402

if __name__ == "__main__":
    # `rebuild` and `scaling` select those benchmarks (runner/rebuild.py, runner/scaling.py);
    # anything else is the suite.
    if sys.argv[1:2] == ["rebuild"]:
        sys.exit(rebuild.main(sys.argv[2:]))
    if sys.argv[1:2] == ["scaling"]:
        sys.exit(scaling.main(sys.argv[2:]))
    sys.exit(suite.main(sys.argv[1:]))
