"""The house rules that a tool can check: the C++ formatted by clang-format (.clang-format), the Python clean under
flake8 (.flake8), and the rooms' imports pointing only down (CONTRIBUTING.md "The house").

The formatters are Debian 12's (clang-format 14, flake8 5): scripts/install-deps.sh installs them in the test tier,
so `make test` and CI run these checks; another version formats differently, so it is refused by name."""
import collections
import os
import re
import shutil
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The floors of the house, bottom first: a room may include headers from its own room and from rooms on lower
# floors only, never from a room beside it or above it (so there is no circle either).
FLOORS = [
    ["core"],                   # types, the operator table, the registry's machinery, options, inputs
    ["io", "mpi"],              # files and .npy; the MPI communicator, codec and work farm
    ["reference"],              # the definitions, term by term
    ["fast"],                   # every other form: serial, scan, chunked, distributed, backward
    ["numerics"],               # bounds, comparison, evaluation, exactness, identity testing, gradient checks
    ["verify", "claims"],       # outside implementations (hla verify); the paper's claims (hla claims)
    ["experiments", "python"],  # sweeps, benchmarks, plots; the Python module
    ["cli"],                    # the hla executable
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def tracked(*patterns):
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise unittest.SkipTest("not a git checkout: the tracked files are unknown")
    return out.stdout.split()


def room_of(path):
    return path.split("/", 1)[0]


def include_edges():
    """(from room, to room) → [file: include], over the tracked sources outside tests/."""
    edges = collections.defaultdict(list)
    for path in tracked("*.cpp", "*.hpp"):
        if path.startswith("tests/"):
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for header in INCLUDE.findall(f.read()):
                if "/" in header and os.path.exists(os.path.join(ROOT, header)):
                    edges[(room_of(path), room_of(header))].append(f"{path}: {header}")
    return edges


class House(unittest.TestCase):
    def test_every_room_has_a_floor(self):
        rooms = {room_of(p) for p in tracked("*.cpp", "*.hpp") if not p.startswith("tests/")}
        self.assertEqual(sorted(rooms - set(FLOOR)), [], "a new room: give it a floor in FLOORS (and CONTRIBUTING.md)")

    def test_includes_point_down_only(self):
        wrong = [f"{a} (floor {FLOOR[a]}) -> {b} (floor {FLOOR[b]}): {where[0]}"
                 for (a, b), where in sorted(include_edges().items())
                 if a != b and a in FLOOR and b in FLOOR and FLOOR[b] >= FLOOR[a]]
        self.assertEqual(wrong, [], "an include that points up or sideways")

    def test_the_check_sees_the_house(self):
        # The edges the layering rests on exist, so an empty result above is not an empty graph.
        edges = include_edges()
        for a, b in [("fast", "core"), ("verify", "numerics"), ("claims", "numerics"), ("cli", "verify")]:
            self.assertIn((a, b), edges)


class Format(unittest.TestCase):
    def test_cpp_is_clang_formatted(self):
        exe = shutil.which("clang-format")
        self.assertIsNotNone(exe, "clang-format is missing: bash scripts/install-deps.sh test")
        version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        self.assertRegex(version, r"version 14\.", "the tree is formatted by Debian 12's clang-format 14")
        files = tracked("*.cpp", "*.hpp")
        self.assertGreater(len(files), 100)
        run = subprocess.run([exe, "--dry-run", "--Werror", *files], cwd=ROOT, capture_output=True, text=True)
        where = sorted({line.split(":")[0] for line in run.stderr.splitlines() if ": error:" in line})
        self.assertEqual(run.returncode, 0, f"not formatted (clang-format -i these): {where}\n{run.stderr[:2000]}")

    def test_python_is_flake8_clean(self):
        have = subprocess.run([sys.executable, "-m", "flake8", "--version"], capture_output=True, text=True)
        self.assertEqual(have.returncode, 0, "flake8 is missing: bash scripts/install-deps.sh test (python3-flake8)")
        files = tracked("*.py")
        self.assertGreater(len(files), 20)
        run = subprocess.run([sys.executable, "-m", "flake8", *files], cwd=ROOT, capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stdout[:3000] + run.stderr[:1000])

    def test_the_checks_can_fail(self):
        # A badly formatted line and a flake8 finding are reported, so a clean result above means something.
        bad_cpp = "int  f( int x ){return x;}\n"
        run = subprocess.run(["clang-format", "--dry-run", "--Werror", f"--style=file:{ROOT}/.clang-format",
                              "--assume-filename=x.cpp"], input=bad_cpp, capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        run = subprocess.run([sys.executable, "-m", "flake8", f"--config={ROOT}/.flake8", "-"],
                             input="import os\nl = 1\n", capture_output=True, text=True)
        self.assertIn("F401", run.stdout)
        self.assertIn("E741", run.stdout)


if __name__ == "__main__":
    unittest.main()
