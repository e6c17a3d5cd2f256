"""Issue 48 (hardening, round three): the commands beside `verify` — check, run, claims, mpi-bench, sweep, merge,
scripts/merge-ledger.py — and the module, against the adversarial classes: sizes, seeds and the OpenMP environment
(one limits layer, core/limits.hpp), FIFOs and symlinks where a file goes (io/files.hpp), malformed CSV, caches and
ledgers, concurrent runs and processes that outlive the harness. Each case was a crash, a hang, exit 70 or a wrong
exit code before; every one is now exit 2 with one line (or a ValueError), with nothing left behind.

Run by scripts/test.sh with HLA_BUILD (the build folder) and PYTHONPATH=<build>/python.
"""
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_hardening import pid_written_to  # noqa: E402
from test_verify import HLA, PY, ROOT  # noqa: E402  (the same build and interpreter)

QUICK = ["--max-n", "16", "--d", "2", "--dv", "2", "--quiet", "--shrink-rounds", "0", "--no-diagnose"]
MERGE_LEDGER = os.path.join(ROOT, "scripts", "merge-ledger.py")
TINY_SWEEP = ("name = 'tiny'\n[axes]\noperator = 'hla2'\nform = 'serial'\nscalar = 'double'\n"
              "n = [8]\nd = [2]\ndv = [2]\n")


class Work(unittest.TestCase):
    """A private folder (and TMPDIR) per test; `hla` runs with a time limit, so a hang fails instead of blocking."""

    def setUp(self):
        self.work = tempfile.mkdtemp()
        self.tmp = self.path("tmp")
        os.mkdir(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def path(self, *names):
        return os.path.join(self.work, *names)

    def env(self, **extra):
        return {**os.environ, "TMPDIR": self.tmp, **extra}

    def hla(self, *args, timeout=60, env=None):
        return subprocess.run([HLA, *args], capture_output=True, timeout=timeout, env=env or self.env())

    def expect_2(self, *args, text=None, env=None, timeout=60):
        t0 = time.time()
        p = self.hla(*args, env=env, timeout=timeout)
        self.assertEqual(p.returncode, 2, (args, p.stdout[-2000:], p.stderr[-2000:]))
        self.assertNotIn(b"internal error", p.stderr)
        # One line: CLI11 adds its pointer to --help, and libgomp, loaded before main, prints its own complaint about
        # an OMP_* value it cannot read (and ignores it) before hla refuses it.
        lines = [x for x in p.stderr.decode(errors="replace").strip().splitlines()
                 if x and not x.startswith("Run with --help") and not x.startswith("libgomp:")]
        self.assertEqual(len(lines), 1, p.stderr)
        if text:
            self.assertIn(text.encode(), p.stderr)
        self.assertLess(time.time() - t0, timeout / 2, args)
        return p

    def write(self, name, text, mode="w"):
        with open(self.path(name), mode) as f:
            f.write(text)
        return self.path(name)


class Environment(Work):
    def test_omp_num_threads_as_libgomp_reads_it(self):
        # Before: " 100000" (a blank, or a '+') passed the check: libgomp read 100000 and `verify` died of SIGSEGV,
        # leaving its log directory.
        for value in (" 100000", "+100000", "100000 ", "2, 100000", "abc", "0", "-1"):
            for cmd in (["verify", "--op", "hla2", "--exec", "true", *QUICK], ["check"], ["run", "--n", "8"]):
                self.expect_2(*cmd, text="OMP_NUM_THREADS", env=self.env(OMP_NUM_THREADS=value))
            self.assertEqual(os.listdir(self.tmp), [], value)
        for value in ("+2", " 1 ", "2,1"):
            p = self.hla("run", "--n", "8", env=self.env(OMP_NUM_THREADS=value))
            self.assertEqual(p.returncode, 0, (value, p.stderr))

    def test_omp_stacksize_beyond_the_machine(self):
        # Before: libgomp failed to create its threads and exited 1, the code of `differs`.
        for name in ("OMP_STACKSIZE", "GOMP_STACKSIZE"):
            for value in ("100000G", "abc", "12X"):
                self.expect_2("run", "--op", "hla2", "--form", "chunked", "--threads", "2", "--n", "64", text=name,
                              env=self.env(**{name: value}))
        p = self.hla("run", "--op", "hla2", "--form", "chunked", "--threads", "2", "--n", "64",
                     env=self.env(OMP_STACKSIZE="8M"))
        self.assertEqual(p.returncode, 0, p.stderr)


class Sizes(Work):
    def test_check_counts_memory_before_it_allocates(self):
        # Before: bad_alloc (exit 70); --d 1000000000 --n 2 was OOM-killed at 23 GB; --d 1e6 --dv 1e6 ran past 60 s.
        for shape in (["--n", "1000000000000"], ["--d", "1000000000", "--n", "2"], ["--d", "1e6", "--dv", "1e6"]):
            self.expect_2("check", *shape)

    def test_mpi_bench_checks_before_mpi(self):
        # Before (under mpirun): bad_alloc for the sizes, exit 0 for --form serial (the end of a table dereferenced)
        # and for --calibrate --n 4 (tokens 8-16 of 4 read).
        self.expect_2("mpi-bench", "--n", "1000000000000", text="needs")
        self.expect_2("mpi-bench", "--n", "1e12")  # not an integer: CLI11 refuses it
        self.expect_2("mpi-bench", "--d", "100000", "--n", "4", text="d and dv")
        self.expect_2("mpi-bench", "--dv", "2147483648", text="d and dv")
        self.expect_2("mpi-bench", "--form", "serial", text="--form")
        self.expect_2("mpi-bench", "--op", "softmax", text="--op")
        self.expect_2("mpi-bench", "--calibrate", "--n", "4", text="--n >= 16")

    def test_seeds_are_exact_in_every_subcommand(self):
        # Before: `check`/`claims --seed -1` and a 20-digit seed ran seed 2^64 - 1 (exit 0).
        for seed in ("-1", "99999999999999999999", "1e3", ""):
            for cmd in (["check"], ["claims", "--id", "hla2.scan.masked", "--out", self.path("c")], ["run"],
                        ["verify", "--op", "hla2", "--exec", "true", *QUICK]):
                self.expect_2(*cmd, "--seed", seed, text="--seed")
        self.assertFalse(os.path.exists(self.path("c")))

    def test_file_mode_reads_headers_against_its_limits(self):
        # Before: a sparse .npy claiming 2^31 values was allocated (16 GiB) before the n <= 8192 check.
        import numpy as np
        h = "{'descr': '<f8', 'fortran_order': False, 'shape': (2147483648,), }"
        h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
        big = self.write("big.npy", b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode(), "wb")
        os.truncate(big, os.path.getsize(big) + 2 ** 34)
        small = {}
        for name in ("q", "k", "v", "o"):
            small[name] = self.path(name + ".npy")
            np.save(small[name], np.ones((4, 2)))
        for arg in ("q", "o"):
            files = {**small, arg: big}
            self.expect_2("verify", "--op", "hla2", *[x for k, f in files.items() for x in ("--" + k, f)],
                          text="more than the", timeout=30)
        self.expect_2("verify", "--op", "hla2", "--gates", *[x for k, f in small.items() for x in ("--" + k, f)],
                      "--gamma-npy", big, text="more than the", timeout=30)


class Claims(Work):
    def test_an_unknown_id_makes_no_folder(self):
        # Before: NEWDIR was created, then the id refused.
        self.expect_2("claims", "--id", "nope", "--out", self.path("NEWDIR"), text="unknown claim id")
        self.assertFalse(os.path.exists(self.path("NEWDIR")))

    def test_a_fifo_where_the_ledger_goes_never_blocks(self):
        # Before: `claims --out D` with D/claims.json a FIFO blocked forever (a full run; a partial one read it).
        out = self.path("D")
        os.mkdir(out)
        os.mkfifo(os.path.join(out, "claims.json"))
        self.expect_2("claims", "--out", out, text="not a regular file", timeout=30)
        p = self.hla("claims", "--id", "hla2.scan.masked", "--quick", "--out", out, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(os.path.join(out, "claims-partial.json")))


class Merge(Work):
    def setUp(self):
        """This version's header and one row, from a tiny sweep."""
        super().setUp()
        cfg = self.write("tiny.toml", TINY_SWEEP)
        p = self.hla("sweep", cfg, "--out", self.path("sweep"), timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("sweep", "points.csv"), "rb") as f:
            self.header, self.row = f.read().split(b"\n")[:2]

    def shard(self, name, rows):
        """A points CSV with the header and `rows`."""
        os.makedirs(self.path("m"), exist_ok=True)
        with open(self.path("m", name), "wb") as f:
            f.write(self.header + b"\n" + b"".join(r + b"\n" for r in rows))

    def test_malformed_rows_are_exit_2(self):
        # Before: an index 'abc', '' or 1e20 was std::stoll's exception: exit 70.
        for index in (b"abc", b"", b"1e20", b"-3", b"99999999999999999999"):
            self.shard("points.csv", [self.row.replace(self.row.split(b",")[0], index, 1)])
            self.expect_2("merge", self.path("m"), "--out", self.path("o.csv"), text="index")
            self.assertFalse(os.path.exists(self.path("o.csv")))

    def test_a_byte_that_is_not_utf8_keeps_the_row(self):
        # Before: the JSON lines threw on it: exit 70 (and a sweep lost the row of a config named so).
        self.shard("points.csv", [self.row.replace(b"tiny", b"ti\xffny")])
        p = self.hla("merge", self.path("m"), "--out", self.path("o.csv"))
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("o.jsonl"), encoding="utf-8") as f:
            self.assertIn("ti\ufffdny", f.read())

    def test_a_fifo_among_the_shards_never_blocks(self):
        self.shard("points.csv", [self.row])
        os.mkfifo(self.path("m", "points-x.csv"))
        self.expect_2("merge", self.path("m"), "--out", self.path("o.csv"), text="not a regular file", timeout=30)

    def test_out_named_like_its_json_lines(self):
        # Before: exit 0, the merged CSV overwritten by the JSON lines at the same path.
        self.shard("points.csv", [self.row])
        self.expect_2("merge", self.path("m"), "--out", self.path("o.jsonl"), text=".jsonl")
        self.assertFalse(os.path.exists(self.path("o.jsonl")))


class Sweeps(Work):
    def test_a_second_sweep_on_one_out_is_refused(self):
        # Before: two sweeps on one --out wrote 72 rows for 36 points. The first holds the folder's lock.
        cfg = self.write("tiny.toml", TINY_SWEEP)
        os.mkdir(self.path("out"))
        with open(self.path("out", ".hla-lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.expect_2("sweep", cfg, "--out", self.path("out"), text="in use")
        self.assertFalse(os.path.exists(self.path("out", "points.csv")))
        p = self.hla("sweep", cfg, "--out", self.path("out"), timeout=120)  # released: runs
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_a_config_file_name_that_is_not_utf8_loses_no_row(self):
        # Before: the first point computed, then exit 70 and its row lost.
        cfg = os.path.join(self.work.encode(), b"ti\xffny.toml")
        with open(cfg, "w") as f:
            f.write(TINY_SWEEP.replace("name = 'tiny'\n", ""))
        p = subprocess.run([HLA.encode(), b"sweep", cfg, b"--out", self.path("o").encode()], capture_output=True,
                           timeout=120, env=self.env())
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("o", "points.csv"), "rb") as f:
            self.assertEqual(len(f.read().splitlines()), 2)

    def test_a_point_that_cannot_fit_is_rejected_not_a_crash(self):
        # Before: n = 2^26 at d = dv = 4096 (within the config limits) was a bad_alloc that ended the sweep.
        cfg = self.write("big.toml", TINY_SWEEP.replace("n = [8]", "n = [67108864]").replace(
            "d = [2]\ndv = [2]", "d = [4096]\ndv = [4096]"))
        p = self.hla("sweep", cfg, "--out", self.path("o"), timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("o", "points.csv")) as f:
            text = f.read()
        self.assertIn("rejected", text)
        self.assertIn("needs at least", text)

    def test_a_forged_reference_cache_is_recomputed(self):
        # Before: a header of 1 x 1 read past its data (an MPFR assertion, SIGABRT); 10^9 x 10^9 was exit 70.
        cfg = self.write("tiny.toml", TINY_SWEEP)
        p = self.hla("sweep", cfg, "--out", self.path("a"), timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        cache = self.path("a", "refcache")
        (name,) = os.listdir(cache)
        want = first_row(self.path("a", "points.csv"))
        for forged in (b"HLAREF1\nliteral\n\n1 1 0 0\n" + b"\0" * 40,
                       b"HLAREF1\nliteral\n\n1000000000 1000000000 0 0\n",
                       b"HLAREF1\nliteral\n\n8 3 0 0\n" + b"\xff" * 8 * 8 * 3 * 5):
            shutil.rmtree(self.path("b"), ignore_errors=True)
            os.makedirs(self.path("b", "refcache"))
            with open(self.path("b", "refcache", name), "wb") as f:
                f.write(forged)
            p = self.hla("sweep", cfg, "--out", self.path("b"), timeout=120)
            self.assertEqual(p.returncode, 0, (forged[:40], p.stderr))
            got = first_row(self.path("b", "points.csv"))
            self.assertEqual(got["status"], want["status"], forged[:40])
            self.assertEqual(got["err_max_abs"], want["err_max_abs"], forged[:40])  # against a recomputed reference
            self.assertNotEqual(got["err_max_abs"], "")


def first_row(csv_path):
    import csv
    with open(csv_path, newline="") as f:
        return next(csv.DictReader(f))


class RoundFour(Work):
    """What the fourth adversarial pass (scripts/attack.py) found in the commands."""

    def test_options_past_the_scalar_are_input_errors(self):
        # Before: `run --ridge 1e400` computed with an infinite λ and ended as a numerical failure (exit 3).
        for args in (["--ridge", "1e400"], ["--normalized", "--eps", "1e400"], ["--gamma", "1e-400"],
                     ["--scalar", "float", "--normalized", "--eps", "1e39"], ["--scalar", "float", "--gamma", "1e-46"]):
            self.expect_2("run", "--n", "8", *args, text="(the --scalar)")
        p = self.hla("run", "--n", "8", "--scalar", "mpfr256", "--ridge", "1e400")  # within MPFR's range
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_the_literal_references_n_by_n_products_are_counted(self):
        # Before: `run --n 100000 --reference` was a bad_alloc (exit 70) and the module's reference() a MemoryError:
        # the literal sums form n x n products, which the memory estimate left out.
        t0 = time.time()
        self.expect_2("run", "--n", "100000", "--d", "2", "--dv", "2", "--reference", text="needs at least")
        self.expect_2("check", "--n", "100000", "--d", "2", "--dv", "2", text="needs at least")
        code = ("import numpy as np, hla_harness\nx = np.ones((100000, 2))\ntry:\n"
                "    hla_harness.reference('hla2', x, x, x)\nexcept ValueError as e:\n    print('ValueError', e)\n")
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("needs at least", p.stdout)
        self.assertLess(time.time() - t0, 20)

    def test_an_error_is_one_line_whatever_the_value_holds(self):
        # Before: a value ending in a newline (or holding a terminal escape) was printed raw: two lines, or a
        # rewritten terminal; and `check --n 0` was "not in range 0.000000 to" DBL_MAX's 309 digits.
        for args in (["run", "--seed", "5\n"], ["check", "--n", "5\n"], ["mpi-bench", "--d", "\x1b[2J"],
                     ["run", "--op", "hla2\nx"], ["sweep", "no\nsuch.toml"]):
            p = self.expect_2(*args)
            self.assertNotIn(b"\x1b", p.stderr)
        for cmd in ("check", "mpi-bench"):
            p = self.expect_2(cmd, "--n", "0", text="not in range 1 to")
            self.assertLess(len(p.stderr), 300)


class Module(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import hla_harness
        cls.h = hla_harness

    def test_nan_into_the_exact_reference_is_a_value_error(self):
        # Before: the process died of SIGFPE (GMP's division by zero converting NaN to a rational).
        code = ("import hla_harness\nfor x in (float('nan'), float('inf')):\n"
                "    for p in ('exact', 'mpfr', 'float64'):\n"
                "        try:\n            hla_harness.reference('hla2', [[x]], [[1.0]], [[1.0]], precision=p)\n"
                "        except ValueError as e:\n            print('ValueError', e)\n")
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("ValueError"), 6, p.stdout)

    def test_state_parts_holds_its_widths(self):
        # Before: d = -1 was a MemoryError; d = 30000 allocated for 31 s first.
        t0 = time.time()
        for d, dv in ((-1, 3), (0, 3), (30000, 3), (3, 10 ** 12)):
            with self.assertRaises(ValueError):
                self.h.state_parts("hla2", d, dv)
        self.assertLess(time.time() - t0, 5)
        self.assertTrue(self.h.state_parts("hla2", 3, 2))

    def test_the_module_reads_the_openmp_environment_too(self):
        code = ("import hla_harness\ntry:\n    hla_harness.state_parts('hla2', 3, 2)\n"
                "except ValueError as e:\n    print('ValueError', e)\n")
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "OMP_NUM_THREADS": " 100000"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ValueError OMP_NUM_THREADS", p.stdout)


class Processes(Work):
    def test_a_command_dies_with_a_killed_harness(self):
        # Before: SIGKILL of `hla verify` mid-round left the command running (no parent-death signal).
        pid_file = self.path("pid")
        script = self.write("stay.py", "import os, signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                            f"open({pid_file!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
        # `exec`: /bin/sh (dash) forks even a simple command line, and the parent-death signal is its direct child's
        # (a forked command is left to the subreaper's clean-up, which a SIGKILLed harness cannot run; hardening.md).
        proc = subprocess.Popen([HLA, "verify", "--op", "hla2", "--exec", f"exec {PY} {script}", *QUICK],
                                env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = pid_written_to(pid_file)
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.time() + 5
        while alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            self.fail("the command outlived the SIGKILLed harness")

    def test_a_forked_command_dies_with_a_killed_harness(self):
        # Before: only /bin/sh had the parent-death signal, and dash forks a line that does not start with `exec`:
        # SIGKILL of `hla verify` mid-round left `sleep 1000` running. Now a guardian kills the command's whole group.
        for fresh in ([], ["--fresh-process"]):
            pid_file = self.path("pid" + "".join(fresh))
            proc = subprocess.Popen([HLA, "verify", "--op", "hla2", "--exec",
                                     f"echo $$ > {pid_file}; sh -c 'sleep 1000; true'", *fresh, *QUICK],
                                    env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            group = pid_written_to(pid_file)
            deadline = time.time() + 30
            while not any(name == "sleep" for name in group_members(group).values()) and time.time() < deadline:
                time.sleep(0.05)
            self.assertIn("sleep", group_members(group).values(), fresh)
            proc.kill()
            proc.wait(timeout=30)
            deadline = time.time() + 5
            while group_members(group) and time.time() < deadline:
                time.sleep(0.05)
            left = group_members(group)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            self.assertEqual(left, {}, f"{fresh}: the command's processes outlived the SIGKILLed harness")

    def test_a_process_hla_started_before_the_command_is_not_its_orphan(self):
        # Before: with a launcher's variable set and no mpirun, Open MPI's singleton MPI_Init starts a daemon, a child
        # of hla; the clean-up after a round killed it as the command's orphan, MPI_Finalize failed (ORTE_ERROR_LOG)
        # and Open MPI's session folder was left in TMPDIR.
        p = self.hla("verify", "--op", "hla2", "--exec", "true", *QUICK, env=self.env(OMPI_COMM_WORLD_SIZE="1"))
        self.assertEqual(p.returncode, 2, p.stderr)  # `true` writes nothing: verdict error
        self.assertNotIn(b"ORTE_ERROR_LOG", p.stderr)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_a_log_file_swapped_for_a_fifo(self):
        # Before: a command that replaced its stderr log by a FIFO hung `verify` in open(), with or without
        # --fresh-process and whatever --timeout (a symlink in its place: tests/test_hardening.cpp).
        swap = self.write("swap.sh", 'log=$(readlink /proc/$$/fd/2); rm -f "$log"; mkfifo "$log"; exit 1\n')
        for fresh in ([], ["--fresh-process"]):
            p = self.hla("verify", "--op", "hla2", "--exec", f"sh {swap}", "--timeout", "10", *fresh, *QUICK,
                         timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(b"verdict: error", p.stdout)
            self.assertEqual(os.listdir(self.tmp), [])


class Combine(Work):
    def test_a_part_name_past_the_file_system_keeps_the_report(self):
        # Before: a 250-character part name was written back through a temporary name past 255 bytes: "File name too
        # long", exit 2 and no report.
        parts = self.path("parts")
        os.mkdir(parts)
        h = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }"
        h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
        with open(os.path.join(parts, "p" * 250 + ".npy"), "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode() + bytes(8))
        cmd = self.write("impl.sh", f'for c in "$1"/*/; do ln -s {parts} "$c/summary"; ln -s {parts} "$c/ab"; done\n')
        p = self.hla("verify", "--op", "hla2", "--combine", "--exec", f"sh {cmd}", "--json", self.path("r.json"),
                     "--quiet", "--d", "2", "--dv", "2", timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertNotIn(b"too long", p.stderr)
        with open(self.path("r.json")) as f:
            self.assertIn("more than the 64 a part name may have", f.read())
        self.assertEqual(os.listdir(self.tmp), [])


def group_members(group):
    """The live processes of a process group: pid -> name (zombies, already dead, are left out)."""
    members = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == group and fields[0] != "Z":
            members[int(entry)] = name
    return members


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Ledger(Work):
    """scripts/merge-ledger.py: every input read and checked before anything is written."""

    def setUp(self):
        super().setUp()
        self.results = self.path("results")
        shutil.copytree(os.path.join(ROOT, "results"), self.results,
                        ignore=lambda d, names: [n for n in names if n not in ("claims.json", "claims.md")])
        self.partial = self.path("partial")
        p = self.hla("claims", "--id", "hla2.scan.masked", "--quick", "--out", self.partial, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)

    def merge(self):
        return subprocess.run([PY, MERGE_LEDGER, self.partial, self.results, "--hla", HLA], capture_output=True,
                              text=True, timeout=120)

    def snapshot(self):
        """The ledger's two files as they are (None: missing; 'not a regular file': a FIFO, never opened)."""
        out = {}
        for name in ("claims.json", "claims.md"):
            path = os.path.join(self.results, name)
            if not os.path.lexists(path) or not os.path.isfile(path):
                out[name] = None if not os.path.lexists(path) else "not a regular file"
                continue
            with open(path, "rb") as f:
                out[name] = f.read()
        return out

    def test_malformed_inputs_change_nothing(self):
        # Before: tracebacks on malformed inputs, and claims.json rewritten before claims.md failed (half-merged).
        cases = {("partial", "claims-partial.md"): ["", "no table\n", "| id | paper |\nno end"],
                 ("partial", "claims-partial.json"): ["", "[]", "{\"meta\": {}, \"claims\": [1]}", "\xff"],
                 ("results", "claims.md"): ["", "| id | paper |"],
                 ("results", "claims.json"): ["{", "{\"meta\": [], \"claims\": []}"]}
        for (folder, name), texts in cases.items():
            path = os.path.join(self.path(folder), name)
            with open(path, "rb") as f:
                good = f.read()
            for text in texts + [None, "FIFO"]:
                if os.path.lexists(path):
                    os.unlink(path)
                if text == "FIFO":
                    os.mkfifo(path)
                elif text is not None:
                    with open(path, "w", encoding="latin-1") as f:
                        f.write(text)
                before = self.snapshot()
                p = self.merge()
                self.assertEqual(p.returncode, 2, (name, text, p.stderr))
                self.assertNotIn("Traceback", p.stderr)
                self.assertEqual(self.snapshot(), before, (name, text))  # nothing written
                if os.path.lexists(path):
                    os.unlink(path)
            with open(path, "wb") as f:
                f.write(good)

    def test_merging_twice_notes_the_run_once(self):
        self.assertEqual(self.merge().returncode, 0)
        once = self.snapshot()
        self.assertEqual(self.merge().returncode, 0)
        self.assertEqual(self.snapshot(), once)


class LedgerMergerFuzz(unittest.TestCase):
    """scripts/merge-ledger.py is Python (no C++ reads a partial ledger), so its fuzzing is here: a seeded generator
    mutates a small valid ledger's four files (bytes cut, flipped, inserted; lines dropped, doubled, swapped; JSON
    values swapped for other types, NaN, lone surrogates, deep nesting; the markdown's sections dropped or emptied),
    and every input ends as exit 2 with the ledger untouched or as a merged ledger that reads back, never a
    traceback. `claims --list` is a script here, so no build is needed."""

    ORDER = ["a.one", "b.two", "c.three"]
    FILES = {
        ("results", "claims.json"): json.dumps({"meta": {"commit": "abc", "seed": 1, "partial_runs": []}, "claims": [
            {"id": "a.one", "verdict": "holds", "seconds": 1.5}, {"id": "b.two", "verdict": "fails"}]}),
        ("results", "claims.md"): (
            "# Claims ledger\n\nGenerated by `hla claims`.\n\n**2 claims: 1 hold, 1 fail, 0 inconclusive.**\n\n"
            "| id | paper | verdict | method | bound / fit |\n|---|---|---|---|---|\n| `a.one` | §1 | holds | m | - |\n"
            "| `b.two` | §2 | fails | m | - |\n\n## Failing claims\n\n### `b.two` — §2\n\nwhy\n\n"
            "## How verdicts are decided\n\nrules\n"),
        ("partial", "claims-partial.json"): json.dumps({"meta": {"commit": "def", "source_tree": "def", "date": "d",
                                                                 "seed": 2, "quick": False},
                                                        "claims": [{"id": "b.two", "verdict": "holds"},
                                                                   {"id": "c.three", "verdict": "fails"}]}),
        ("partial", "claims-partial.md"): (
            "# Claims ledger (partial)\n\n**2 claims: 1 hold, 1 fail, 0 inconclusive.**\n\n"
            "| id | paper | verdict | method | bound / fit |\n|---|---|---|---|---|\n| `b.two` | §2 | holds | m | - |\n"
            "| `c.three` | §3 | fails | m | - |\n\n## Failing claims\n\n### `c.three` — §3\n\nwhy\n\n"
            "## How verdicts are decided\n\nrules\n")}
    ODD_VALUES = [None, True, 0, -1, 10 ** 30, 1e308, float("nan"), "", "\ud800", "x" * 1000, [], {}, [[]], {"id": 1}]

    def setUp(self):
        import importlib.util
        self.work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.work, True)
        self.hla = os.path.join(self.work, "hla")
        with open(self.hla, "w") as f:
            f.write("#!/bin/sh\necho '" + "\n".join(f"{i} paper statement" for i in self.ORDER) + "'\n")
        os.chmod(self.hla, 0o755)
        spec = importlib.util.spec_from_file_location("merge_ledger", MERGE_LEDGER)
        self.script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.script)

    def mutate_json(self, rng, text):
        doc = json.loads(text)
        node, key = {"root": doc}, "root"
        while isinstance(node[key], (dict, list)) and node[key] and rng.random() < 0.75:
            node = node[key]
            key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        value = rng.choice(self.ODD_VALUES + ["deep"])
        if isinstance(node, dict) and rng.random() < 0.3 and key != "root":
            del node[key]
        else:
            node[key] = "\0deep" if value == "deep" else value
        depth = rng.choice([50, 500, 900, 5000])
        return json.dumps(node["root"] if key == "root" else doc).replace('"\\u0000deep"', "[" * depth + "]" * depth)

    def mutate(self, rng, name, text):
        data = text.encode()
        how = rng.randrange(9)
        if how == 0:
            return data[:rng.randrange(len(data) + 1)]
        if how == 1:
            b = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.choice([0, 0x0a, 0x60, 0x7c, 0x23, 0xff, rng.randrange(256)])
            return bytes(b)
        if how == 2:
            at = rng.randrange(len(data) + 1)
            return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))) + data[at:]
        lines = text.split("\n")
        if how in (3, 4, 5):
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            if how == 3:
                del lines[i]
            elif how == 4:
                lines.insert(i, lines[j])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            return "\n".join(lines).encode()
        if name.endswith(".json"):
            return self.mutate_json(rng, text).encode("utf-8", "surrogatepass")
        sections = ["## Failing claims", "## How verdicts are decided", "| id | paper |", "### `", "\n\n", "**"]
        cut = rng.choice(sections)
        if how == 6:
            return text.replace(cut, "", rng.choice([1, -1])).encode()
        if how == 7:  # a section emptied: its heading straight before the next one
            return re.sub(r"## Failing claims\n[\s\S]*?(?=\n## How)", "## Failing claims", text).encode()
        return text.replace(cut, cut * 2, 1).encode()

    def test_generated_malformed_ledgers(self):
        import contextlib
        import io
        import random
        rng = random.Random(48)
        folders = {f: os.path.join(self.work, f) for f in ("results", "partial")}
        cases = exits = merged = 0
        t0 = time.time()
        for case in range(600):
            for f in folders.values():
                shutil.rmtree(f, ignore_errors=True)
                os.mkdir(f)
            files = dict(self.FILES)
            chosen = rng.sample(sorted(files), rng.choice([1, 1, 1, 2]))
            for key in chosen:
                files[key] = self.mutate(rng, key[1], files[key])
            for (folder, name), data in files.items():
                with open(os.path.join(folders[folder], name), "wb") as f:
                    f.write(data if isinstance(data, bytes) else data.encode())
            before = {k: files[k] for k in files if k[0] == "results"}
            err = io.StringIO()
            argv = ["merge-ledger.py", folders["partial"], folders["results"], "--hla", self.hla]
            what = (case, {k: files[k][:300] for k in chosen})
            with mock.patch.object(sys, "argv", argv), contextlib.redirect_stderr(err), \
                    contextlib.redirect_stdout(io.StringIO()):
                try:
                    self.script.main()
                    code = 0
                except SystemExit as e:
                    code = e.code
                except Exception:  # a traceback: the finding
                    self.fail(f"{what}: {traceback.format_exc()}")
            cases += 1
            if code == 2:
                exits += 1
                self.assertTrue(err.getvalue().startswith("merge-ledger: error: "), (what, err.getvalue()))
                self.assertEqual(len(err.getvalue().strip().splitlines()), 1, (what, err.getvalue()))
                for (folder, name), data in before.items():  # the ledger untouched
                    with open(os.path.join(folders[folder], name), "rb") as f:
                        self.assertEqual(f.read(), data if isinstance(data, bytes) else data.encode(), what)
                self.assertEqual(sorted(os.listdir(folders["results"])), ["claims.json", "claims.md"], what)
            else:
                self.assertEqual(code, 0, (what, err.getvalue()))
                merged += 1
                with open(os.path.join(folders["results"], "claims.json"), encoding="utf-8") as f:
                    ids = [c["id"] for c in json.load(f, parse_constant=self.fail)["claims"]]  # no NaN: strict JSON
                self.assertEqual(ids, [i for i in self.ORDER if i in ids], what)
                with open(os.path.join(folders["results"], "claims.md"), encoding="utf-8") as f:
                    self.assertIn("| id | paper |", f.read(), what)
        self.assertGreater(exits, 100)  # the generator reaches both ends
        self.assertGreater(merged, 20)
        self.assertLess(time.time() - t0, 30)


if __name__ == "__main__":
    unittest.main()
