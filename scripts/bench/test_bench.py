#!/usr/bin/env python3
"""Unit tests of the GPU benchmark's pure functions (report.py, bench.py's workload expansion,
scale.py's table, builds.py's side-by-side summary and service check).
Run: python3 scripts/bench/test_bench.py (scripts/test.sh does). Standard library only."""
import io
import json
import os
import sys
import tempfile
import time
import unittest
from contextlib import redirect_stdout

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import builds  # noqa: E402
import host_usage  # noqa: E402
import lent_threads  # noqa: E402
import crucible_mode  # noqa: E402
import report  # noqa: E402
import scale  # noqa: E402


def task(label, speedup, ker=None, expect="correct", got="correct", **kw):
    return dict({"label": label, "expect": expect, "got": got, "speedup": speedup, "ker_ms": ker,
                 "evaluated": True, "service_ms": 100.0, "overhead_ms": 10.0, "stage_ms": {}}, **kw)


def run(mode, tasks, wall=60.0, worker_env="", timing=None, mem=None):
    gpu = {"samples": 0} if mem is None else {"samples": 10, "util_sum": 500.0, "busy_samples": 5,
                                              "mem_max_mib": mem, "mem_min_mib": 500.0}
    return {"mode": mode, "tasks": tasks, "wall_s": wall, "gpu": gpu, "queue_delta": {},
            "complete": True, "worker_env": worker_env, "timing": timing,
            "workload": "scripts/bench/workload-small.json"}


def report_text(runs, workload):
    """The report of `runs` for `workload`, as printed (it must exit 0)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "results.json")
        with open(path, "w") as f:
            json.dump({"runs": runs}, f)
        out = io.StringIO()
        with redirect_stdout(out):
            rc = report.report(path, False, workload)
    assert rc == 0, out.getvalue()
    return out.getvalue()


class Pure(unittest.TestCase):
    def test_pct(self):
        self.assertIsNone(report.pct([], 50))
        self.assertEqual(report.pct([3.0], 95), 3.0)
        self.assertEqual(report.pct([1, 2, 3, 4, None], 50), 2.5)
        self.assertAlmostEqual(report.pct(list(range(101)), 95), 95.0)

    def test_rel_diffs_honest_matched(self):
        a = [task("x", 2.2), task("y", 1.0), task("w", 3.0, expect="incorrect", got="incorrect"),
             task("z", 1.5, got="RUNTIME"), task("only-a", 1.0), task("none", None)]
        b = [task("x", 2.0), task("y", 1.0), task("w", 1.0, expect="incorrect", got="incorrect"),
             task("z", 1.0), task("none", 1.0)]
        self.assertEqual(sorted(round(d, 6) for d in report.rel_diffs(a, b)), [0.0, 0.1])
        self.assertEqual(report.rel_diffs(a, b, "ker_ms"), [])

    def test_stage_totals(self):
        ts = [task("a", 1, stage_ms={"correctness": 10.0, "performance": 5.0, "device_stage": 20.0}),
              task("b", 1, stage_ms={"correctness": 2.5, "triton_precompile": 7.0, "weird": 1.0}),
              task("c", 1, cached=True, stage_ms={"correctness": 1000.0})]
        tot = report.stage_totals(ts)
        self.assertEqual(tot, {"device_stage": 20.0, "triton_precompile": 7.0, "correctness": 12.5,
                               "performance": 5.0, "weird": 1.0})
        self.assertEqual(list(tot), ["device_stage", "triton_precompile", "correctness", "performance", "weird"])

    def test_pairing(self):
        labels = {"naive": 0, "slots=1": 0, "slots=4": 0, "adaptive": 0, "checks-off": 0}
        r = lambda env: {"worker_env": env}
        self.assertEqual(report.worker_slots(r("A=1 CRUCIBLE_DEVICE_SLOTS=4 B=2")), 4)
        self.assertIsNone(report.worker_slots(r("")))
        self.assertEqual(report.base_label("slots=4", r("CRUCIBLE_DEVICE_SLOTS=4"), labels), "slots=1")
        self.assertIsNone(report.base_label("slots=1", r("CRUCIBLE_DEVICE_SLOTS=1"), labels))
        self.assertEqual(report.base_label("adaptive", r("CRUCIBLE_DEVICE_SLOTS=4"), labels), "slots=4")
        self.assertIsNone(report.base_label("adaptive", r("CRUCIBLE_DEVICE_SLOTS=2"), labels))
        self.assertIsNone(report.base_label("naive", r(""), labels))
        self.assertEqual(report.base_label("slots=1#2", r("CRUCIBLE_DEVICE_SLOTS=1"), labels), "slots=1")

    def test_report_end_to_end(self):
        runs = [run("naive", [task("x", 2.0, 1.0), task("y", 1.0, 2.0)], wall=240.0),
                run("slots=1", [task("x", 2.0, 1.0), task("y", 1.0, 2.0)], 30.0, "CRUCIBLE_DEVICE_SLOTS=1", mem=900.0),
                run("slots=4", [task("x", 2.1, 1.0), task("y", 1.0, 2.0)], 15.0, "CRUCIBLE_DEVICE_SLOTS=4", mem=1500.0),
                run("adaptive", [task("x", 2.0, 1.0), task("y", 1.2, 2.0)], 10.0, "CRUCIBLE_DEVICE_SLOTS=4", "adaptive"),
                dict(run("on", [task("x", 1.0)]), workload="scripts/bench/workload.json")]
        text = report_text(runs, "scripts/bench/workload-small.json")
        self.assertIn("1,500 MiB", text)
        self.assertIn("500 MiB", text)
        self.assertIn("best slots row slots=4 16.00x naive (met, >= 8x)", text)
        self.assertIn("adaptive 24.00x naive (met, >= 12x)", text)
        self.assertIn("slots=4 vs slots=1 speedups agree within 2.5 % p50", text)
        self.assertIn("(1 runs of other workloads", text)

    def test_report_shows_the_hosts_cpu_and_memory_of_either_naming(self):
        host = {"mean": 52.0, "saturated": 0.25, "samples": 100, "memory_peak_bytes": 3 << 30}
        runs = [dict(run("lent", [task("x", 1.0)]), host=host),
                dict(run("split", [task("x", 1.0)]),
                     host_cpu={"mean": 40.0, "saturated": 0.0, "samples": 50}),
                run("none", [task("x", 1.0)])]
        text = report_text(runs, "scripts/bench/workload-small.json")
        row = next(line for line in text.splitlines() if line.startswith("host CPU busy"))
        self.assertIn("52 % / 25 %", row)
        self.assertIn("40 % / 0 %", row, "a run of 2026-12-03 named them host_cpu")
        self.assertIn("n/a", row, "a run without them")
        memory = next(line for line in text.splitlines() if line.startswith("host memory in use"))
        self.assertIn("3.0 GiB", memory)
        self.assertEqual(memory.count("n/a"), 2, "no memory figure: n/a")

    def test_kernelbench_targets_take_the_fastest_row(self):
        big = lambda r: dict(r, workload="scripts/bench/workload.json")
        runs = [big(run("naive", [task("x", 2.0, 1.0), task("y", 1.0, 2.0)], wall=120.0)),
                big(run("slots=1", [task("x", 2.0, 1.0), task("y", 1.0, 2.0)], 40.0, "CRUCIBLE_DEVICE_SLOTS=1", mem=900.0)),
                big(run("slots=4", [task("x", 2.0, 1.0), task("y", 1.1, 2.0)], 20.0, "CRUCIBLE_DEVICE_SLOTS=4", mem=900.0))]
        text = report_text(runs, "scripts/bench/workload.json")
        self.assertIn("(slots=4) throughput 6.00x naive (met, >= 5x)", text)
        self.assertIn("GPU busy 50 % (NOT met, >= 80 %)", text)
        self.assertIn("slots=4 vs slots=1 speedups agree within 5.0 % p50", text)


class Workload(unittest.TestCase):
    def test_small_workload_shape(self):
        items = bench.expand_workload(os.path.join(bench.HERE, "workload-small.json"))
        self.assertEqual(len(items), 24)
        expects = [it["expect"] for it in items]
        self.assertEqual((expects.count("correct"), expects.count("incorrect"), expects.count("RUNTIME")), (16, 4, 4))
        self.assertEqual(len({it["label"] for it in items}), 24)
        self.assertEqual(len({it["kernel_code"] for it in items}), 24)
        for it in items:
            self.assertIn("@triton.jit", it["kernel_code"])
            self.assertIn("class ModelNew", it["kernel_code"])
        self.assertEqual(len({it["problem"] for it in items}), 6)

    def test_timing_field(self):
        it = {k: 1 for k in ("reference_code", "kernel_code", "backend", "num_correct_trials",
                             "num_perf_trials", "timeout_s")}
        self.assertNotIn("timing", crucible_mode.request_body(it, True))
        self.assertEqual(crucible_mode.request_body(it, True, "adaptive")["timing"], {"mode": "adaptive"})


def window_line(task_id, gpu, a_us, b_us):
    """A worker's "timing window" log line as tracing writes it (with colours)."""
    return (f"2026-11-24T18:00:00.000000Z \x1b[32m INFO\x1b[0m crucible_gpu_worker::worker::run: timing window "
            f"\x1b[3mworker_id\x1b[0m\x1b[2m=\x1b[0mw1 \x1b[3mtask_id\x1b[0m\x1b[2m=\x1b[0m{task_id} "
            f"\x1b[3mgpu\x1b[0m\x1b[2m=\x1b[0m{gpu} \x1b[3mfrom_unix_us\x1b[0m\x1b[2m=\x1b[0m{a_us} "
            f"\x1b[3muntil_unix_us\x1b[0m\x1b[2m=\x1b[0m{b_us}")


class Scale(unittest.TestCase):
    def test_modes_follow_the_gpus_unless_told(self):
        self.assertEqual(scale.modes_for(8), [1, 2, 4, 8])
        self.assertEqual(scale.modes_for(3), [1, 2])
        self.assertEqual(scale.modes_for(0), [1], "no nvidia-smi: one (CPU) worker")
        self.assertEqual(scale.modes_for(8, "2, 1"), [1, 2])
        with self.assertRaises(SystemExit):
            scale.modes_for(8, "0,2")

    def test_the_workload_is_copied_to_enough_distinct_evaluations_per_worker(self):
        items = [{"label": "a", "kernel_code": "x"}, {"label": "b", "kernel_code": "y"},
                 {"label": "c", "kernel_code": "z"}]
        out = scale.scaled(items, 4, 8)
        self.assertEqual(len(out), 33, "11 copies of 3: the first count >= 32")
        self.assertEqual(len({it["label"] for it in out}), 33)
        self.assertEqual(len({it["kernel_code"] for it in out}), 33, "no copy is cached or coalesced")
        self.assertEqual(scale.scaled(items, 1, 2), items, "enough already: unchanged")

    def test_timings_overlap_only_on_one_device(self):
        log = "\n".join([window_line("t1", 0, 1_000_000, 2_000_000), "other line",
                         window_line("t2", 0, 2_000_000, 3_000_000)])
        windows = scale.timing_windows(log)
        self.assertEqual(windows, [("0", "t1", 1.0, 2.0), ("0", "t2", 2.0, 3.0)])
        other = scale.timing_windows(window_line("t3", 1, 1_500_000, 2_500_000))
        self.assertEqual(scale.max_overlap(windows + other), {"0": 1, "1": 1},
                         "back to back on GPU 0, GPU 1 beside it: no overlap")
        twin = scale.timing_windows(window_line("t4", 0, 2_500_000, 2_600_000))
        self.assertEqual(scale.max_overlap(windows + twin)["0"], 2, "two timings at once on GPU 0")
        cpu = scale.timing_windows(window_line("t5", "cpu", 2_500_000, 2_600_000), stand_in="cpu1")
        self.assertEqual(cpu[0][0], "cpu1", "a CPU stand-in is a device of its own")

    def test_rows_compare_with_the_smallest_mode(self):
        def mode(n, wall, tasks, windows=()):
            return {"workers_n": n, "wall_s": wall, "tasks": tasks, "busy": {"0": 50.0},
                    "overlap": scale.max_overlap(windows), "timings": len(windows)}
        base_tasks = [task("a", 1, stage_ms={"compile_slot_wait": 500.0}), task("b", 1, expect="incorrect", got="incorrect"),
                      task("c", 1, stage_ms={"build_cache": 3.0})]
        one = mode(1, 60.0, base_tasks)
        row1 = scale.summary(one, one)
        one["evals_per_min"] = row1["evals_per_min"]
        two = mode(2, 20.0, [task("a", 1), task("b", 1), task("c", 1)],
                   [("0", "a", 0.0, 2.0), ("0", "b", 1.0, 3.0)])
        row2 = scale.summary(two, one)
        self.assertEqual((row1["evals_per_min"], row1["ratio"]), (3.0, 1.0))
        self.assertEqual((row2["evals_per_min"], row2["ratio"], row2["target"]), (9.0, 3.0, 1.7))
        self.assertEqual((row1["slot_waits"], row1["slot_wait_max_s"], row1["cache_hits"]), (1, 0.5, 1))
        self.assertEqual(row2["verdict_diffs"], ["b"])
        self.assertEqual(row2["max_timings_at_once"], 2)
        self.assertTrue(scale.verdict_ok([row1]))
        self.assertFalse(scale.verdict_ok([row1, row2]))
        self.assertEqual(row1["unexpected"], [])
        broken = mode(1, 60.0, [task("a", 1, got="RUNTIME"), task("b", 1, expect="incorrect", got="incorrect")])
        row = scale.summary(broken, broken)
        self.assertEqual(row["unexpected"], ["a"], "failing like every other mode is still a failure")
        self.assertFalse(scale.verdict_ok([row]))
        text = scale.table([row1, row2])
        self.assertIn("evals/min", text)
        self.assertEqual(len(text.splitlines()), 3)

    def test_speedups_are_compared_evaluation_by_evaluation(self):
        base = {"tasks": [dict(task("a", 1), speedup=2.0), dict(task("b", 1), speedup=1.0),
                          dict(task("c", 1), speedup=None), dict(task("d", 1), speedup=4.0)]}
        run = {"tasks": [dict(task("a", 1), speedup=2.0), dict(task("b", 1), speedup=1.5),
                         dict(task("c", 1), speedup=3.0), dict(task("e", 1), speedup=1.0)]}
        mid, low, high = scale.speedup_drift(base, run)
        self.assertAlmostEqual(mid, 1.25, msg="a unchanged, b 1.5x; c untimed in base, e absent")
        self.assertTrue(low < mid < high)
        self.assertEqual(scale.speedup_drift(base, {"tasks": []}), (None, None, None))

    def test_host_cpu_busy_is_the_busy_share_between_two_readings(self):
        self.assertEqual(host_usage.cpu_busy((100, 1000), (150, 1100)), 50.0)
        self.assertIsNone(host_usage.cpu_busy(None, (1, 2)))
        self.assertIsNone(host_usage.cpu_busy((1, 2), (1, 2)), "no time passed")
        busy, total = host_usage.cpu_times()
        self.assertTrue(0 <= busy <= total, "this host's /proc/stat")

    def test_host_cpu_summary_counts_saturated_samples(self):
        summary = host_usage.summarise([95.0, 50.0, None, 90.0, 10.0])
        self.assertEqual(summary["samples"], 4, "an interval without a reading is left out")
        self.assertEqual(summary["saturated"], 0.5, "90 % and above is saturated")
        self.assertAlmostEqual(summary["mean"], 61.25)
        self.assertIsNone(host_usage.summarise([None]))
        sampler = host_usage.HostSampler(interval_s=0.01).start()
        deadline = time.monotonic() + 10
        while all(x is None for x in sampler.samples) and time.monotonic() < deadline:
            time.sleep(0.01)
        summary = sampler.stop()
        self.assertIsNotNone(summary, "this host has /proc/stat")
        self.assertTrue(0 <= summary["mean"] <= 100)
        self.assertGreater(summary["memory_peak_bytes"], 0, "this host has /proc/meminfo")

    def test_stage_table_has_a_median_per_mode(self):
        runs = [{"workers_n": n, "tasks": [task("a", 1, stage_ms={"setup": 100.0 * n}),
                                           task("b", 1, stage_ms={"setup": 300.0 * n})]}
                for n in (1, 2)]
        lines = scale.stage_table(runs).splitlines()
        self.assertEqual(len(lines), 3)
        self.assertEqual(lines[1].split()[:2], ["1", "200"])
        self.assertEqual(lines[2].split()[:2], ["2", "400"])
        self.assertIn("n/a", lines[1], "a stage no task reported")



class LentThreads(unittest.TestCase):
    def test_core_lists_are_read_as_the_worker_writes_them(self):
        self.assertEqual(lent_threads.parse_cpus("0-3,8"), [0, 1, 2, 3, 8])
        self.assertEqual(lent_threads.parse_cpus("15"), [15])

    def test_time_on_a_device_core_is_counted_inside_timing_windows_less_the_grace(self):
        lines = [
            {"t": 10.0, "tid": 1, "cpus": [0, 1, 8, 9]},   # lent
            {"t": 10.5, "tid": 2, "cpus": [0, 1]},         # vacated
            {"t": 11.0, "tid": 1, "cpus": [0, 1]},         # moved off at 11.0
            {"t": 12.0, "tid": 1, "cpus": [0, 1, 8, 9]},   # lent again
            {"t": 12.2, "tid": 1, "cpus": None},           # gone
            {"t": 13.0, "tid": 3, "cpus": [8]},            # open until the end
            {"t": 14.0, "tid": 2, "cpus": None},
        ]
        spans = lent_threads.intervals(lines, {8, 9}, end=14.0)
        self.assertEqual(sorted(spans), [(10.0, 11.0), (12.0, 12.2), (13.0, 14.0)])
        # A window from 10.99 (the move at 11.0 is 10 ms late: inside the grace), one from
        # 11.0 to 12.1 (0.1 s of tid 1 after it was lent again) and one with nobody lent.
        inside, hit = lent_threads.overlap(spans, [(10.99, 11.5), (11.0, 12.1), (12.3, 12.9)],
                                           grace_s=0.025)
        self.assertAlmostEqual(inside, 0.1)
        self.assertEqual(hit, 1)


class Builds(unittest.TestCase):
    def test_ninja_log_gives_each_targets_time(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, ".ninja_log")
            with open(path, "w") as f:
                f.write("# ninja log v5\n0\t21000\t1\tmain.o\tab\n5\t30005\t1\tcuda.cuda.o\tcd\n"
                        "30010\t30300\t1\text.so\tef\n")
            self.assertEqual(builds.ninja_targets(path),
                             {"main.o": 21000, "cuda.cuda.o": 30000, "ext.so": 290})
            self.assertEqual(builds.ninja_targets(os.path.join(d, "none")), {})

    def test_summary_compares_each_arm_with_torch_and_each_unit(self):
        rows = [{"torch": t, "overlap": c, "pch": False,
                 "torch_targets": {"main.o": 20000, "cuda.cuda.o": 30000},
                 "overlap_targets": {"main.o": 20000, "cuda.cuda.o": 21000}}
                for t, c in [(30.0, 30.0), (40.0, 31.0), (50.0, 32.0)]]
        rows.append({"torch": 45.0, "overlap": None, "pch": False, "torch_targets": {},
                     "overlap_targets": {}})
        s = builds.summarize(rows, ["torch", "overlap"], {})
        self.assertEqual((s["torch"]["p50"], s["overlap"]["p50"]), (40.0, 31.0))
        self.assertAlmostEqual(s["overlap"]["ratio_p50"], 31.0 / 40.0)
        self.assertAlmostEqual(s["overlap"]["per_build_ratio_p50"], 31.0 / 40.0)
        self.assertEqual((s["torch"]["cuda.cu"], s["overlap"]["cuda.cu"]), (30.0, 21.0))
        self.assertEqual((s["builds"], s["failed"]), (3, 1), "a failed build leaves the table")

    def test_compiler_error_lines_are_recognised(self):
        for line in ['build/x/cuda.cu(138): error: identifier "AT_CUDA_CHECK" is undefined',
                     "main.cpp:3:12: error: expected ';' before '}' token",
                     "cuda.cu:7:1: fatal error: missing.h: No such file or directory"]:
            self.assertTrue(builds.COMPILER_ERROR.search(line), line)
        for line in ["ninja: build stopped: subcommand failed.",
                     "[1/3] /usr/local/cuda/bin/nvcc -c cuda.cu -o cuda.cuda.o"]:
            self.assertFalse(builds.COMPILER_ERROR.search(line), line)

    def test_check_fails_a_wrong_verdict_a_device_build_and_a_hidden_compiler_error(self):
        with tempfile.TemporaryDirectory() as d:
            cands = os.path.join(d, "candidates", "cuda")
            os.makedirs(cands)
            entries = []
            for name, expect in [("a", "correct"), ("b", "correct"), ("c", "COMPILATION")]:
                open(os.path.join(cands, name + ".py"), "w").close()
                entries.append({"problem": "p.py", "candidate": os.path.join(cands, name + ".py"),
                                "backend": "cuda", "expect": expect, "style": "init"})
            workload = os.path.join(d, "w.json")
            with open(workload, "w") as f:
                json.dump({"problems_root": d, "entries": entries}, f)

            def results(b_build, c_error, label=None):
                tasks = [
                    {"label": "p|cuda/a", "expect": "correct", "got": "correct",
                     "build": "compile_pool", "stage_ms": {"device_stage": 3000}},
                    {"label": "p|cuda/b", "expect": "correct", "got": "correct",
                     "build": b_build, "stage_ms": {"device_stage": 40000}},
                    {"label": "p|cuda/c", "expect": "COMPILATION", "got": "COMPILATION",
                     "build": None, "error": c_error, "stage_ms": {}}]
                path = os.path.join(d, "r.json")
                with open(path, "w") as f:
                    # bench.py names a run's label `mode`; a later run of another label is
                    # not the one asked for.
                    json.dump({"runs": [{"mode": "x", "tasks": tasks},
                                        {"mode": "y", "tasks": tasks[:1]}]}, f)
                return argparse_namespace(results=path, label=label, workload=workload)

            good = "load_inline failed to build: compiler errors:\ncuda.cu(12): error: identifier"
            with redirect_stdout(io.StringIO()):
                self.assertEqual(builds.check(results("compile_pool", good, label="x")), 0)
                self.assertEqual(builds.check(results("device", good, label="x")), 1)
                self.assertEqual(builds.check(results("compile_pool", "ninja: build stopped", label="x")), 1)
                self.assertEqual(builds.check(results("device", good)), 0,
                                 "no label: the last run, y, has only the candidate built in the pool")
                with self.assertRaises(SystemExit):
                    builds.check(results("compile_pool", good, label="z"))


def argparse_namespace(**kw):
    import argparse
    return argparse.Namespace(**kw)

if __name__ == "__main__":
    unittest.main()
