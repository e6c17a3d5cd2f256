"""Issue 27 (hardening, round two): `hla verify`, `sweep`, `run` and the module against hostile and careless
input. Every outside input ends in a verdict or in exit 2 with a message; nothing is left in TMPDIR; no
process outlives the harness; nothing is written where the user did not say. The library-level cases are
in tests/test_hardening.cpp.

Run by scripts/test.sh with HLA_BUILD (the build folder) and PYTHONPATH=<build>/python.
"""
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_verify import HLA, IMPLS, PY, ROOT  # noqa: E402  (the same build, interpreter and implementations)

QUICK = ["--max-n", "16", "--d", "2", "--dv", "2", "--quiet", "--shrink-rounds", "0", "--no-diagnose"]


class PrivateTmp(unittest.TestCase):
    """Each test runs `hla` with its own TMPDIR, which must be empty again when `hla` has exited."""

    def setUp(self):
        self.work = tempfile.TemporaryDirectory()
        self.tmp = os.path.join(self.work.name, "tmp")
        os.mkdir(self.tmp)

    def tearDown(self):
        self.work.cleanup()

    def env(self, **extra):
        return {**os.environ, "TMPDIR": self.tmp, **extra}

    def hla(self, *args, timeout=120, **kw):
        return subprocess.run([HLA, *args], capture_output=True, timeout=timeout, env=kw.pop("env", self.env()), **kw)

    def assert_tmp_empty(self):
        self.assertEqual(os.listdir(self.tmp), [], "left in TMPDIR")

    def path(self, name):
        return os.path.join(self.work.name, name)


class Reports(PrivateTmp):
    def test_stderr_that_is_not_utf8_keeps_the_verdict(self):
        # Before: writing the report threw (exit 1, no verdict) and left an empty r.json.tmp.
        out = self.path("r.json")
        p = self.hla("verify", "--op", "hla2", "--exec", "printf 'tqdm 50%%\\342\\226\\377\\n' >&2; exit 1; :",
                     "--json", out, *QUICK)
        self.assertEqual(p.returncode, 2, p.stderr)
        with open(out, encoding="utf-8") as f:
            r = json.load(f)
        self.assertEqual(r["verdict"], "error")
        self.assertIn("tqdm 50%\ufffd", json.dumps(r["rounds"], ensure_ascii=False))
        self.assertEqual(r["seed"], 1)  # the report records the seed the cases came from
        self.assertEqual(sorted(os.listdir(self.work.name)), ["r.json", "tmp"])
        self.assert_tmp_empty()

    def test_json_is_never_written_through_a_planted_symlink(self):
        victim, out = self.path("victim"), self.path("r.json")
        with open(victim, "w") as f:
            f.write("keep")
        os.symlink(victim, out + ".tmp")
        p = self.hla("verify", "--op", "hla2", "--exec", "exit 1; :", "--json", out, *QUICK)
        self.assertEqual(p.returncode, 2, p.stderr)
        with open(victim) as f:
            self.assertEqual(f.read(), "keep")
        with open(out) as f:
            self.assertEqual(json.load(f)["verdict"], "error")

    def test_unusable_output_paths_are_refused_before_the_battery(self):
        # Before: a directory gave exit 1 (and wrote <dir>.tmp); an unwritable path lost the verdict at the end.
        os.mkdir(self.path("dir"))
        for out in (self.path("dir"), self.path("missing/r.json")):
            t0 = time.time()
            p = self.hla("verify", "--op", "hla2", "--exec", "sleep 100; :", "--json", out, *QUICK)
            self.assertEqual(p.returncode, 2, (out, p.stderr))
            self.assertIn(b"--json", p.stderr)
            self.assertLess(time.time() - t0, 20)  # refused before the command ran
        self.assertFalse(os.path.exists(self.path("dir.tmp")))
        p = self.hla("verify", "--op", "hla2", "--combine", "--exec", "true", "--parts", self.path("dir"), *QUICK[:-4])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assert_tmp_empty()


class ReturnedFiles(PrivateTmp):
    def command(self, script):
        path = self.path("impl.sh")
        with open(path, "w") as f:
            f.write(script)
        return f"sh {path}"

    def test_a_16_gib_sparse_output_is_refused_from_its_header(self):
        # Before: read whole before its shape was checked: the harness was OOM-killed.
        header = self.path("header.npy")
        h = "{'descr': '<f8', 'fortran_order': False, 'shape': (2147483648,), }"
        h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
        with open(header, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode())
        size = os.path.getsize(header) + 2 ** 34  # the header's 2^31 doubles, none of them on disk
        cmd = self.command(f'for c in "$1"/*/; do cp {header} "$c/o.npy"; truncate -s {size} "$c/o.npy"; done\n')
        t0 = time.time()
        p = self.hla("verify", "--op", "hla2", "--exec", cmd, "--json", self.path("r.json"), *QUICK)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertLess(time.time() - t0, 60)
        with open(self.path("r.json")) as f:
            self.assertIn("values, more than the", json.dumps(json.load(f)["findings"]))
        self.assert_tmp_empty()

    def test_symlink_loops_are_findings_and_nothing_is_left(self):
        # Before: the throwing fs::exists ended in "internal error" (exit 1), temporary directories left.
        for script in ('for c in "$1"/*/; do ln -s o.npy "$c/o.npy"; done\n',
                       'for c in "$1"/*/; do ln -s state_out "$c/state_out"; cp /dev/null "$c/o.npy"; done\n',
                       'for c in "$1"/*/; do mkdir "$c/d"; ln -s ../d "$c/d/loop"; chmod 0 "$c"; done\n',
                       'mkfifo "$1/fifo"; for c in "$1"/*/; do mkfifo "$c/o.npy"; done\n'):
            p = self.hla("verify", "--op", "hla2", "--state", "--exec", self.command(script), *QUICK, timeout=60)
            self.assertEqual(p.returncode, 2, (script, p.stderr))
            self.assertNotIn(b"internal error", p.stderr)
            self.assert_tmp_empty()

    def test_a_combine_command_writing_too_many_parts_is_refused_unread(self):
        parts = self.path("parts")  # 100 one-value float64 parts, linked into every case
        os.mkdir(parts)
        h = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }"
        h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
        for i in range(100):
            with open(os.path.join(parts, f"p{i}.npy"), "wb") as f:
                f.write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode() + bytes(8))
        cmd = self.command(f'for c in "$1"/*/; do ln -s {parts} "$c/summary"; ln -s {parts} "$c/ab"; done\n')
        p = self.hla("verify", "--op", "hla2", "--combine", "--exec", cmd, "--json", self.path("r.json"), "--quiet",
                     "--d", "2", "--dv", "2")
        self.assertEqual(p.returncode, 2, p.stderr)
        with open(self.path("r.json")) as f:
            self.assertIn("holds 100 .npy parts, more than the 64", f.read())
        self.assert_tmp_empty()

    def test_a_right_implementation_that_locks_its_folder_still_computes(self):
        cmd = self.command(f'{PY} {IMPLS} hla2 "$1" && chmod -R a-w "$1"\n')
        p = self.hla("verify", "--op", "hla2", "--exec", cmd, *QUICK)
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assert_tmp_empty()


def running_in_group(group):
    """The processes of a process group that still run (a killed one may stay a zombie until init reaps it)."""
    running = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            running.append(int(pid))
    return running


def pid_written_to(path, timeout=60):
    """The process id a command writes to `path`, once it has (waiting up to `timeout` s)."""
    deadline = time.time() + timeout
    while not (os.path.exists(path) and os.path.getsize(path)) and time.time() < deadline:
        time.sleep(0.05)
    with open(path) as f:
        return int(f.read())


class Signals(PrivateTmp):
    def interrupt(self, sig, code):
        pid_file = self.path("pid")
        # The command writes its process group (its shell's pid) and sleeps, as a training script holding a GPU.
        proc = subprocess.Popen([HLA, "verify", "--op", "hla2", "--exec", f"echo $$ > {pid_file}; sleep 60; :", *QUICK],
                                env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        group = pid_written_to(pid_file)
        self.assertTrue(os.listdir(self.tmp))  # the round's folders exist while it runs
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, code, err)
        self.assertEqual(running_in_group(group), [], "the implementation's process group outlived hla")
        self.assert_tmp_empty()

    def test_sigterm(self):
        self.interrupt(signal.SIGTERM, 143)

    def test_sigint_as_ctrl_c(self):
        # Before: the implementation, in its own process group, never saw a terminal's Ctrl-C and was orphaned.
        self.interrupt(signal.SIGINT, 130)

    def test_sighup(self):
        self.interrupt(signal.SIGHUP, 129)


class Processes(PrivateTmp):
    def test_a_daemon_the_command_starts_does_not_outlive_its_round(self):
        # setsid leaves the command's process group, which the time-out and the end of a round kill.
        pid_file = self.path("pid")
        p = self.hla("verify", "--op", "hla2", "--exec", f"setsid sleep 300 & echo $! > {pid_file}; exit 1; :", *QUICK)
        self.assertEqual(p.returncode, 2, p.stderr)
        with open(pid_file) as f:
            pid = int(f.read())
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state not in ("gone", "Z"):
            os.kill(pid, signal.SIGKILL)
        self.assertIn(state, ("gone", "Z"), "the daemon outlived hla")
        self.assert_tmp_empty()


class Environment(PrivateTmp):
    def test_bad_tmpdir_is_exit_2(self):
        for bad in ("/nonexistent", "/proc", "/dev/null"):
            p = self.hla("verify", "--op", "hla2", "--exec", "true", *QUICK, env=self.env(TMPDIR=bad))
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn(b"TMPDIR", p.stderr)

    def test_a_full_disk_is_exit_2_and_leaves_nothing(self):
        # A file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) fails the writes as a full disk does.
        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))
        p = self.hla("verify", "--op", "hla2", "--exec", "true", *QUICK, preexec_fn=limit)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"cannot write", p.stderr)
        self.assert_tmp_empty()


class Options(PrivateTmp):
    def expect_2(self, *args, text=None):
        p = self.hla(*args, timeout=60)
        self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
        self.assertNotIn(b"internal error", p.stderr)
        if text:
            self.assertIn(text.encode(), p.stderr)

    def test_timeouts_that_never_expire(self):
        for t in ("nan", "inf", "1e400", "-1", "0", "1e9"):
            self.expect_2("verify", "--op", "hla2", "--exec", "true", "--timeout", t, *QUICK, text="--timeout")

    def test_options_the_dtype_cannot_hold(self):
        self.expect_2("verify", "--op", "hla2", "--normalized", "--eps", "1e400", "--exec", "true", *QUICK,
                      text="--eps")
        self.expect_2("verify", "--op", "hla2", "--ridge", "1e400", "--exec", "true", *QUICK, text="--ridge")
        self.expect_2("verify", "--op", "hla2", "--ridge", "1e38", "--dtype", "float32", "--exec", "true", *QUICK,
                      text="too large for float32")

    def test_threads_the_machine_cannot_run(self):
        for t in ("65536", "33000"):
            self.expect_2("run", "--op", "hla2", "--form", "chunked", "--threads", t, "--n", "8",
                          text="threads must lie in")

    def test_run_counts_the_state_before_it_allocates(self):
        # Before: std::bad_alloc (an internal error) for a d x d state of 10^10 values.
        self.expect_2("run", "--op", "hla2", "--form", "serial", "--d", "100000", "--n", "4", text="needs at least")

    def test_seed_beyond_64_bits(self):
        self.expect_2("verify", "--op", "hla2", "--exec", "true", "--seed", "18446744073709551616", *QUICK,
                      text="--seed")
        self.expect_2("run", "--seed", "99999999999999999999999", text="--seed")  # before: ran seed 2^64 - 1

    def test_file_mode_refuses_what_it_would_ignore(self):
        files = ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--o", "o.npy"]
        for extra in (["--state"], ["--grad"], ["--max-n", "8"], ["--fixed-d"]):
            self.expect_2("verify", "--op", "hla2", *files, *extra, text=extra[0])
        self.expect_2("verify", "--op", "hla2", "--npz", "a.npz", "--q", "q.npy", text="--npz")

    def test_sweeps_that_crash_or_exhaust_memory(self):
        deep = self.path("deep.toml")
        with open(deep, "w") as f:
            f.write("a" + ".a" * 35000 + " = 1\n")
        self.expect_2("sweep", deep, "--dry-run", text="nested")
        huge = self.path("huge.toml")
        with open(huge, "w") as f:
            f.write("[axes]\noperator = 'hla2'\nform = 'serial'\n")
            for axis in ("n", "d", "dv", "seeds", "repeats", "chunk"):
                f.write(f"{axis} = [{', '.join(str(i) for i in range(1, 101))}]\n")
        self.expect_2("sweep", huge, "--dry-run", text="combinations")
        self.expect_2("sweep", os.path.join(ROOT, "configs", "default.toml"), "--out",
                      "/proc/x")  # before: internal error


class Module(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import hla_harness
        cls.h = hla_harness

    def test_normalized_without_eps_computes_for_every_operator(self):
        # Before: "no exact case of shape ... within the magnitude limit" (an internal error) for every operator.
        for op in ("hla2", "hla2-unmasked", "ahla", "hla3", "hla3-unmasked", "linear"):
            def ref(q, k, v, op=op, **o):
                return self.h.reference(op, q, k, v, precision="float64", **o)

            r = self.h.verify(ref, op, normalized=True, max_n=16, d=2, dv=2, shrink_rounds=0, diagnose=False)
            self.assertEqual(r["verdict"], "computes", (op, r["summary"]))

    def test_normalized_without_eps_through_the_cli(self):
        p = subprocess.run([HLA, "verify", "--op", "hla2", "--normalized", "--exec", f"{PY} {IMPLS} hla2", *QUICK],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_normalized_without_eps_with_gradients(self):
        # Before: with --grad the long exact cases never fit the magnitude limit: an internal error (exit 70) in the
        # CLI, a RuntimeError in the module. Now those lengths are left to the random cases and a verdict comes.
        grad_impls = os.path.join(os.path.dirname(IMPLS), "grad_impls.py")
        p = subprocess.run([HLA, "verify", "--op", "hla2", "--normalized", "--grad", "--exec",
                            f"{PY} {grad_impls} hla2-serial", *QUICK], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("normalized=computes", p.stdout)
        p = subprocess.run([HLA, "verify", "--op", "hla2", "--normalized", "--grad", "--exec", "exit 1; :", *QUICK],
                           capture_output=True, text=True, timeout=300)
        self.assertNotIn("internal error", p.stdout + p.stderr)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)  # a command that fails every case: verdict error
        self.assertIn("verdict: error", p.stdout)

    def test_keyboard_interrupt_stops_the_battery(self):
        # Before: caught as that case's error, and the battery went on to the next case.
        calls = []

        def fn(q, k, v, **o):
            calls.append(1)
            raise KeyboardInterrupt
        with self.assertRaises(KeyboardInterrupt):
            self.h.verify(fn, "hla2", max_n=16, d=2, dv=2)
        self.assertEqual(len(calls), 1)

    def test_timeout(self):
        def spin(q, k, v, **o):
            while True:
                pass
        t0 = time.time()
        r = self.h.verify(spin, "hla2", max_n=16, d=2, dv=2, timeout=0.5, shrink_rounds=0)
        self.assertLess(time.time() - t0, 30)
        self.assertEqual(r["verdict"], "error")
        self.assertIn("timed out after 0.5 s", json.dumps(r["findings"]))
        for bad in (float("nan"), float("inf"), 0.0):
            with self.assertRaises(ValueError):
                self.h.verify(spin, "hla2", timeout=bad)
        time.sleep(0.2)  # no TimeoutError left pending to surface later

    def test_gamma_none_is_a_value_error(self):
        with self.assertRaises(ValueError):
            self.h.verify(lambda q, k, v: v, "hla2", gamma=None)
        with self.assertRaises(ValueError):
            self.h.reference("hla2", [[1.0]], [[1.0]], [[1.0]], eps=[1])


if __name__ == "__main__":
    unittest.main()
