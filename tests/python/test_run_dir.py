"""`make run` on this machine (scripts/run.sh, issue 49), on a tiny sweep config: it measures into a run directory of
its own (never results/), leaves the tracked tree as it found it, ends with that run's report page labelled as this
machine's run, resumes only points this build measured on this machine (`hla sweep --same-build`), and refuses a
run directory of another host or a points file holding another build's points with one line and exit code 2,
changing nothing.

Run by scripts/test.sh with HLA_BUILD (the build folder).
"""
import csv
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_verify import BUILD, ROOT  # noqa: E402  (the same build)

TINY = """name = "tiny"
[axes]
operator = "hla2"
form = ["serial", "chunked"]
variant = "corrected"
scalar = ["float", "double"]
n = [64, 128, 256]
d = 4
dv = 4
chunk = 16
repeats = 1
"""


def tracked_changes():
    return subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                          text=True).stdout


class MakeRunDirectory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hla-run-")
        cls.config = os.path.join(cls.tmp, "tiny.toml")
        with open(cls.config, "w") as f:
            f.write(TINY)
        cls.run_dir = os.path.join(cls.tmp, "run")
        cls.before = tracked_changes()
        cls.first = cls.run_script(cls.run_dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def run_script(cls, run_dir):
        env = dict(os.environ, SWEEPS=cls.config, LEDGER="skip")
        return subprocess.run(["bash", os.path.join(ROOT, "scripts", "run.sh"), BUILD, run_dir], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    def rows(self):
        with open(os.path.join(self.run_dir, "tiny", "points.csv"), newline="") as f:
            return list(csv.DictReader(f))

    def test_measures_here_into_its_own_directory_and_ends_with_its_report(self):
        self.assertEqual(self.first.returncode, 0, self.first.stderr[-3000:])
        rows = self.rows()
        self.assertEqual(len(rows), 12)
        self.assertIn({r["host"] for r in rows}, ({socket.gethostname()}, {socket.gethostname().split(".")[0]}))
        self.assertEqual({r["threads_used"] for r in rows}, {"1"}, "threads = 1 points ran on one thread")
        self.assertTrue(all(float(r["load_1min"]) >= 0 for r in rows))
        with open(os.path.join(self.run_dir, "report.html")) as f:
            page = f.read()
        self.assertIn("<b>Your run</b>", page)
        self.assertNotIn("The published run", page)
        self.assertIn("report.html", self.first.stdout.splitlines()[-1])
        self.assertEqual(tracked_changes(), self.before, "make run changed tracked files")

    def test_resumes_its_own_points_only(self):
        again = self.run_script(self.run_dir)
        self.assertEqual(again.returncode, 0, again.stderr[-3000:])
        self.assertIn("resuming: 12 of 12 points", again.stderr)

        other = os.path.join(self.tmp, "other-build")
        shutil.copytree(self.run_dir, other)
        path = os.path.join(other, "tiny", "points.csv")
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        rows[1][rows[0].index("cpu")] = "Another CPU"  # one point measured elsewhere
        with open(path, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
        with open(path) as f:
            tampered = f.read()
        refused = self.run_script(other)
        self.assertEqual(refused.returncode, 2, refused.stderr[-2000:])
        line = refused.stderr.strip().splitlines()[-1]
        self.assertRegex(line, r"points\.csv: 1 of its 12 points were measured by another build or machine \(cpu "
                               r"'Another CPU'")
        with open(path) as f:
            self.assertEqual(f.read(), tampered, "nothing written")

    def test_refuses_a_run_directory_of_another_host(self):
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.makedirs(elsewhere)
        with open(os.path.join(elsewhere, "run.json"), "w") as f:
            f.write('{"host": "some-other-host", "started": "2026-01-01T00:00:00Z", "build": "build"}\n')
        p = self.run_script(elsewhere)
        self.assertEqual(p.returncode, 2)
        self.assertIn("was measured on another host", p.stderr)
        self.assertEqual(os.listdir(elsewhere), ["run.json"])


if __name__ == "__main__":
    unittest.main()
