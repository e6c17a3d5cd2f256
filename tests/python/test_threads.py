"""`--threads 1` means one thread (issue 49): nothing else runs or spins for a form asked to use one thread — not
Eigen's OpenMP GEMM, which started omp_get_max_threads() threads for a large product made outside the forms' own
parallel regions (fast/gemm/xsmm.cpp). Beside a CPU hog on every core a form then waited on threads the scheduler did
not run: `hla run --op hla2 --form chunked --threads 1` took 0.28–0.69 s at n = 16384 where OMP_NUM_THREADS=1 took
0.004 s. Checked as a ratio of the two, measured side by side (never absolute times).

Run by scripts/test.sh with HLA_BUILD (the build folder).
"""
import os
import re
import statistics
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_verify import HLA  # noqa: E402  (the same build)

RUN = [HLA, "run", "--op", "hla2", "--form", "chunked", "--scalar", "float", "--n", "16384", "--d", "16", "--dv", "16",
       "--threads", "1"]


def seconds(env):
    p = subprocess.run(RUN, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    m = re.search(r": ([0-9.]+) s \(reference skipped", p.stdout)
    assert m, p.stdout
    return float(m.group(1))


class OneThreadMeansOne(unittest.TestCase):
    def test_threads_1_beside_a_cpu_hog_runs_like_omp_num_threads_1(self):
        unset = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
        asked = {k: v for k, v in os.environ.items() if k not in unset}
        pinned = dict(asked, OMP_NUM_THREADS="1")
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
        try:
            times = {"threads": [], "pinned": []}
            for _ in range(7):  # alternated, so that both see the same load
                times["threads"].append(seconds(asked))
                times["pinned"].append(seconds(pinned))
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        ratio = statistics.median(times["threads"]) / statistics.median(times["pinned"])
        self.assertLess(ratio, 3.0, f"--threads 1 is {ratio:.1f}x OMP_NUM_THREADS=1 beside a CPU hog: {times}")


if __name__ == "__main__":
    unittest.main()
