"""Unit tests of the benchmark runner's arithmetic and parsing, against values worked out by
hand. Run with `python3 -m unittest discover -s bench/tests` from the repository root (no root,
fio or daemon needed)."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import cpu, goals, stats  # noqa: E402
from runner.rebuild import report as rebuild_report  # noqa: E402
from runner.scaling import report as scaling_report  # noqa: E402
from runner.fio import (  # noqa: E402
    Connection,
    Stream,
    first_logged_ms,
    parse_output,
    render_job_file,
    seconds_option,
    start_spread_seconds,
)
from runner.stats import Figure  # noqa: E402
from runner.workloads import CORNERS, Point, corner_points, sweep_points  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"


class FioOutput(unittest.TestCase):
    def setUp(self):
        self.groups = parse_output((DATA / "fio-two-groups.json").read_text())

    def test_groups_in_order_with_the_connect_line_skipped(self):
        self.assertEqual(len(self.groups), 2)
        self.assertEqual(self.groups[0].read.iops, 50000.0)
        self.assertEqual(self.groups[1].write.iops, 2000.0)

    def test_latency_percentiles_in_microseconds(self):
        self.assertEqual(self.groups[0].read.clat_us, {"p50": 18.432, "p99": 61.44, "p99_9": 250.88})
        # A direction without I/O has no percentiles.
        self.assertEqual(self.groups[0].write.clat_us, {})

    def test_cpu_seconds_from_percentages_of_the_summed_runtime(self):
        # (10 + 15) % of 6.000 s = 1.5 s; (2 + 3) % of 3.000 s = 0.15 s.
        self.assertAlmostEqual(self.groups[0].cpu_seconds, 1.5)
        self.assertAlmostEqual(self.groups[1].cpu_seconds, 0.15)


class JobFiles(unittest.TestCase):
    def test_rate_limit_is_shared_among_connections_and_streams_get_groups(self):
        connections = [Connection.nbd(f"nbd+unix:///?socket=/s{i}", 1 << 20) for i in range(3)]
        streams = [
            Stream("randread", 4096, 32, rate_iops_total=1000),
            Stream("randwrite", 4096, 4, rate_iops_total=90),
        ]
        text = render_job_file(connections, streams, 1.0, 3.0)
        self.assertEqual(text.count("\n[s0c"), 3)
        self.assertEqual(text.count("\n[s1c"), 3)
        # ceil(1000 / 3) = 334 per read job; 90 / 3 = 30 per write job.
        self.assertEqual(text.count("rate_iops=334"), 3)
        self.assertEqual(text.count("rate_iops=30"), 3)
        # Exactly one job opens the second reporting group, and it is the first write job.
        self.assertEqual(text.count("new_group"), 1)
        self.assertLess(text.index("[s1c0]"), text.index("new_group"))
        self.assertLess(text.index("new_group"), text.index("[s1c1]"))
        self.assertIn("ramp_time=1\n", text)
        self.assertIn("runtime=3\n", text)

    def test_unlimited_streams_have_no_rate(self):
        text = render_job_file([Connection.file("/mnt/f", 4096)], [Stream("read", 131072, 1)], 1, 1)
        self.assertNotIn("rate_iops", text)
        self.assertIn("direct=1", text)
        self.assertIn("filename=/mnt/f", text)

    def test_fractional_seconds_go_in_milliseconds(self):
        self.assertEqual(seconds_option(0.5), "500ms")
        self.assertEqual(seconds_option(3), "3")
        self.assertEqual(seconds_option(1.25), "1250ms")


class JobTiming(unittest.TestCase):
    def test_iops_logs_are_asked_for_with_wall_clock_times(self):
        connections = [Connection.nbd(f"nbd+unix:///?socket=/s{i}", 1 << 20) for i in range(2)]
        text = render_job_file(connections, [Stream("randread", 4096, 32)], 1.0, 3.0, "/r/x-run1")
        global_section = text[: text.index("[s0c0]")]
        self.assertIn("write_iops_log=/r/x-run1\n", global_section)
        self.assertIn("log_avg_msec=100\n", global_section)
        self.assertIn("log_unix_epoch=1\n", global_section)
        self.assertNotIn("write_iops_log", render_job_file(connections, [Stream("read", 4096, 1)], 1.0, 3.0))

    def test_first_line_of_a_log(self):
        log = "1764316800100, 51234, 0, 4096, 0\n1764316800200, 50877, 0, 4096, 0\n"
        self.assertEqual(first_logged_ms(log), 1764316800100)
        self.assertIsNone(first_logged_ms("\n"))

    def test_spread_of_starts(self):
        # The run seen on 2026-11-28: four jobs within 0.6 s, the fifth 3.0 s after the first.
        firsts = [1000, 1200, 4000, 1600, 1000]
        self.assertAlmostEqual(start_spread_seconds(firsts), 3.0)
        self.assertAlmostEqual(start_spread_seconds([5000, 5100]), 0.1)
        self.assertEqual(start_spread_seconds([5000, None]), float("inf"))
        self.assertEqual(start_spread_seconds([]), float("inf"))


class Workloads(unittest.TestCase):
    def test_ten_corner_points(self):
        keys = [point.key for point in corner_points()]
        self.assertEqual(len(keys), 10)
        self.assertIn("mix7030-4k-qd1", keys)
        self.assertIn("seqwrite-128k-qd32", keys)

    def test_corner_subset_keeps_both_depths(self):
        keys = [point.key for point in corner_points(keys=["randwrite-4k", "seqwrite-128k"])]
        self.assertEqual(
            keys, ["randwrite-4k-qd1", "seqwrite-128k-qd1", "randwrite-4k-qd32", "seqwrite-128k-qd32"]
        )
        with self.assertRaises(ValueError):
            corner_points(keys=["randwrite-8k"])

    def test_sweep_steps_end_unlimited_and_repeat_with_writes(self):
        points = sweep_points([0.5, 0.25])
        self.assertEqual(
            [point.key for point in points],
            [
                "sweep-reads-only-025",
                "sweep-reads-only-050",
                "sweep-reads-only-100",
                "sweep-with-writes-025",
                "sweep-with-writes-050",
                "sweep-with-writes-100",
            ],
        )
        self.assertEqual(points[1].rate_iops(40000), 20000)
        self.assertEqual(points[2].rate_iops(40000), 0)
        self.assertEqual(len(points[3].streams(40000, 2000)), 2)
        self.assertEqual(points[3].streams(40000, 2000)[1].rate_iops_total, 2000)

    def test_corner_point_is_not_rate_limited(self):
        self.assertEqual(Point(CORNERS[0], 32).rate_iops(100000), 0)


class Statistics(unittest.TestCase):
    def test_coefficient_of_variation(self):
        # Sample standard deviation of 90, 100, 110 is 10; over the mean 100: 0.1.
        self.assertAlmostEqual(stats.coefficient_of_variation([90, 100, 110]), 0.1)
        self.assertIsNone(stats.coefficient_of_variation([100]))

    def test_fold_means_and_flags(self):
        rows = [
            {"target": "raid5", "state": "optimal", "point": "p", "iops": value, "p99_us": 10.0}
            for value in (80.0, 100.0, 120.0)
        ]
        figure = stats.fold(rows)[("raid5", "optimal", "p")]
        self.assertEqual(figure.runs, 3)
        self.assertAlmostEqual(figure.get("iops"), 100.0)
        self.assertAlmostEqual(figure.iops_cv, 0.2)
        self.assertTrue(figure.noisy)


class CpuAccounting(unittest.TestCase):
    def test_process_stat_with_a_command_name_holding_spaces_and_parentheses(self):
        # Fields 14 and 15 (utime, stime) are 250 and 50 ticks.
        line = "4242 (tessera (x) y) S 1 4242 4242 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 3 0 99"
        self.assertAlmostEqual(
            cpu.process_cpu_seconds_from_stat(line), 300 / cpu.CLOCK_TICKS_PER_SECOND
        )

    def test_kernel_threads_that_exit_or_are_new_never_subtract(self):
        before = {10: 5.0, 11: 56.0, 12: 9.0}
        # 10 ran 0.5 s more; 11 exited; 12 is a new thread under a reused pid; 13 is new.
        after = {10: 5.5, 12: 0.25, 13: 0.5}
        self.assertAlmostEqual(cpu.kernel_threads_delta_seconds(before, after), 0.5 + 0.25 + 0.5)

    def test_machine_busy_leaves_out_idle_and_iowait(self):
        text = "cpu  100 20 30 5000 70 4 6 10 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
        # user 100 + nice 20 + system 30 + irq 4 + softirq 6 + steal 10 = 170 ticks.
        self.assertAlmostEqual(
            cpu.machine_busy_seconds_from_stat(text), 170 / cpu.CLOCK_TICKS_PER_SECOND
        )


def figure(**means) -> Figure:
    return Figure(runs=3, means=means, iops_cv=0.01)


class Goals(unittest.TestCase):
    def test_raid5_against_baseline_and_efficiency(self):
        figures = {
            ("raid5", "optimal", "randread-4k-qd32"): figure(iops=96.0, iops_per_server_cpu_percent=5.0),
            ("baseline", "optimal", "randread-4k-qd32"): figure(iops=100.0, iops_per_server_cpu_percent=4.0),
            ("raid5", "optimal", "randwrite-4k-qd32"): figure(iops=40.0),
            ("baseline", "optimal", "randwrite-4k-qd32"): figure(iops=100.0),
        }
        by_requirement = {goal.requirement: goal for goal in goals.check(figures)}
        read = next(g for r, g in by_requirement.items() if r.startswith("RAID5 4+1 4K random read"))
        self.assertTrue(read.passed)
        self.assertEqual(read.measured, "0.96x")
        write = next(g for r, g in by_requirement.items() if r.startswith("RAID5 4+1 4K random write"))
        self.assertFalse(write.passed)
        efficiency = next(g for r, g in by_requirement.items() if "CPU-percent" in r)
        self.assertTrue(efficiency.passed)
        mix = next(g for r, g in by_requirement.items() if r.startswith("RAID5 4+1 4K 70/30"))
        self.assertIsNone(mix.passed)

    def test_tail_and_degraded(self):
        figures = {
            ("raid5", "optimal", goals.TAIL_POINT): figure(p99_9_us=160.0),
            ("baseline", "optimal", goals.TAIL_POINT): figure(p99_9_us=100.0),
            ("raid5", "optimal", "seqread-128k-qd32"): figure(iops=100.0),
            ("raid5", "degraded", "seqread-128k-qd32"): figure(iops=69.0),
        }
        checked = goals.check(figures)
        tail = next(g for g in checked if "p99.9" in g.requirement)
        self.assertFalse(tail.passed)  # 1.6x > 1.5x
        degraded = next(g for g in checked if g.requirement.startswith("RAID5 degraded 128K"))
        self.assertFalse(degraded.passed)  # 0.69 < 0.7
        self.assertEqual(degraded.measured, "0.69x")

    def test_journal_cost_takes_the_worse_queue_depth(self):
        figures = {
            ("raid5", "optimal", "randwrite-4k-qd1"): figure(iops=100.0),
            ("raid5-journal", "optimal", "randwrite-4k-qd1"): figure(iops=85.0),
            ("raid5", "optimal", "randwrite-4k-qd32"): figure(iops=1000.0),
            ("raid5-journal", "optimal", "randwrite-4k-qd32"): figure(iops=790.0),
            ("raid5", "optimal", "seqwrite-128k-qd32"): figure(iops=100.0),
            ("raid5-journal", "optimal", "seqwrite-128k-qd32"): figure(iops=96.0),
            # Half-stripe writes at QD1 are reported but not held to the full-stripe limit.
            ("raid5", "optimal", "seqwrite-128k-qd1"): figure(iops=100.0),
            ("raid5-journal", "optimal", "seqwrite-128k-qd1"): figure(iops=80.0),
        }
        checked = goals.check(figures)
        random_write = next(g for g in checked if g.requirement.startswith("RAID5 journal always_on 4K"))
        self.assertEqual(random_write.measured, "0.79x")
        self.assertFalse(random_write.passed)  # a 21% cost at QD32 > 20%
        sequential = next(g for g in checked if g.requirement.startswith("RAID5 journal always_on 128K"))
        self.assertTrue(sequential.passed)  # 4% <= 5%
        raid6 = next(g for g in checked if g.requirement.startswith("RAID6 journal always_on 4K"))
        self.assertIsNone(raid6.passed)


if __name__ == "__main__":
    unittest.main()


class RebuildReport(unittest.TestCase):
    def test_ratios_against_the_limit_the_full_rebuild_and_the_optimal_group(self):
        mib = 1 << 20
        results = {
            "physical_limit": {
                "survivor_read_bytes_per_second_each": 3000 * mib,
                "replacement_write_bytes_per_second": 2000 * mib,
                "limit_bytes_per_second": 2000 * mib,
            },
            "idle_full": {"seconds": 0.8, "bytes_per_second": 1280 * mib, "ratio_to_limit": 0.64},
            "idle_quarter": {"seconds": 0.24, "ratio_to_full": 0.3},
            "optimal_host": {"iops": 40000.0},
            "loaded": [
                {"rate_percent": 30, "host_iops": 30000.0, "host_iops_ratio": 0.75,
                 "read_p99_us": 2500.0, "rebuild_seconds": 4.0},
            ],
        }
        text = rebuild_report(results)
        self.assertIn("| 2,000 MiB/s |", text)
        self.assertIn("**0.64x** the limit", text)
        self.assertIn("**0.30x** the full one's time", text)
        self.assertIn("| 30% | 30,000 | 0.75x | 2,500 us | 4.0 s |", text)


class ScalingReport(unittest.TestCase):
    @staticmethod
    def row(target, state, point, iops, server_cpu_seconds=1.5, wall_seconds=3.0, **extra):
        # IOPS per CPU-percent as run_point computes it.
        cpu_percent = 100 * server_cpu_seconds / wall_seconds
        return {"target": target, "state": state, "point": point, "iops": iops,
                "mb_per_second": iops * 4096 / 1e6, "server_cpu_seconds": server_cpu_seconds,
                "wall_seconds": wall_seconds, "iops_per_server_cpu_percent": iops / cpu_percent,
                "p50_us": 100.0, "p99_us": 400.0, **extra}

    def test_depth_rows_give_cpu_per_io_and_the_ratio_to_nbdkit_memory(self):
        rows = [
            # Two runs, 90k and 110k: mean 100k, CV 14% (flagged).
            self.row("raid5", "qd32", "randread-4k-qd32", 90_000),
            self.row("raid5", "qd32", "randread-4k-qd32", 110_000),
            self.row("memory", "qd32", "randread-4k-qd32", 125_000),
            self.row("memory", "qd32", "randread-4k-qd32", 125_000),
        ]
        text = scaling_report(rows, [32], [])
        # 1.5 s of CPU in 3 s is 50%: 100,000 / 50 = 2,000 IOPS per CPU-% -> 10^4 / 2,000 = 5 us.
        self.assertIn("| 32 | 100,000* | 100 | 400 | 5.0 | 125,000 | 0.80 | - |", text)
        self.assertNotIn("## Members", text)

    def test_core_rows_compare_the_confined_daemon_with_the_free_one(self):
        rows = [
            self.row("raid5", "jobs2", "randwrite-4k-qd32", 80_000, server_cpu_seconds=3.0),
            self.row("raid5-one-core", "jobs2", "randwrite-4k-qd32", 60_000, server_cpu_seconds=2.7),
        ]
        text = scaling_report(rows, [], [])
        self.assertIn("| 4K random write IOPS | 2 | 80,000 | 100 | 60,000 | 90 | 0.75 |", text)
        self.assertIn("| 4K random read IOPS | 1 | - | - | - | - | - |", text)
