"""The build's own edges (docs/hardening.md): what CMake hands ccache must tell one CPU's objects from another's.

ccache hashes the command line, and `-march=native` reads the same on every machine; a cache that moves
between machines (a persistent disk, CI on the developer's machine) would hand a Zen 4 objects compiled for
a Sapphire Rapids. The configure step writes the compiler's own expansion of native into the build tree and
the launcher hashes it; builds without -march (Debug, the sanitizers) share objects across machines.
"""
import os
import pathlib
import platform
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def configure(build_dir, *flags):
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DHLA_BUILD_TESTS=OFF", "-DHLA_BUILD_BENCH=OFF",
                    "-DHLA_BUILD_PYTHON=OFF", *flags], check=True, stdout=subprocess.DEVNULL)
    return (build_dir / "CMakeFiles" / "hla_numeric_units.dir" / "build.make").read_text()


def launcher(build_make):
    """The words before the compiler on the first compile line of the library's units."""
    line = next(ln for ln in build_make.splitlines() if "$(CXX_FLAGS)" in ln)
    return line.split("$(CXX_DEFINES)")[0].split()


@unittest.skipUnless(shutil.which("ccache"), "ccache not installed: nothing is cached")
class NativeTargetInCacheKey(unittest.TestCase):
    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="hla-build-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_release_native_hashes_the_expansion_of_native(self):
        words = launcher(configure(self.tmp / "release", "-DCMAKE_BUILD_TYPE=Release"))
        extra = [w for w in words if w.startswith("CCACHE_EXTRAFILES=")]
        self.assertEqual(len(extra), 1, words)
        expansion = pathlib.Path(extra[0].split("=", 1)[1]).read_text()
        # the compiler's resolved target: GCC names -march=<cpu> and every -m feature, clang -target-cpu
        self.assertRegex(expansion, r'"?-march=(?!native)[a-z0-9-]+|-target-cpu')
        self.assertIn("avx2" if "avx2" in pathlib.Path("/proc/cpuinfo").read_text() else "sse2", expansion)
        self.assertNotRegex(expansion, r"/tmp/\S+")  # same text on every configure of this CPU
        self.assertIn(f"CCACHE_BASEDIR={ROOT}", words)

    def test_explicit_march_and_debug_builds_hash_no_cpu(self):
        for flags in (["-DCMAKE_BUILD_TYPE=Release", "-DHLA_MARCH=haswell"], ["-DCMAKE_BUILD_TYPE=Debug"]):
            with self.subTest(flags=flags):
                words = launcher(configure(self.tmp / re.sub(r"\W", "", "".join(flags)), *flags))
                self.assertFalse([w for w in words if w.startswith("CCACHE_EXTRAFILES=")], words)
                self.assertIn(f"CCACHE_BASEDIR={ROOT}", words)


class PrecompiledHeaders(unittest.TestCase):
    """GCC uses a precompiled header built with other -O options than the unit's without a word (not even with
    -Winvalid-pch), and then compiles the header's inline functions at the header's level: measured, a -O3 form unit
    given a -O1 header lost a third of its code. So no unit that includes a target's precompiled header may carry
    an -O option of its own (CMakeLists.txt sets them per target, and skips the header where a unit differs)."""

    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="hla-pch-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_no_unit_with_a_precompiled_header_has_its_own_optimization(self):
        for flags in (["-DCMAKE_BUILD_TYPE=Release"], ["-DCMAKE_BUILD_TYPE=Debug", "-DHLA_SANITIZE=ON"]):
            with self.subTest(flags=flags):
                build = self.tmp / re.sub(r"\W", "", "".join(flags))
                subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DHLA_BUILD_BENCH=OFF",
                                "-DHLA_BUILD_PYTHON=OFF", *flags], check=True, stdout=subprocess.DEVNULL)
                targets = ["hla_numeric_units", "hla_logic_units", "hla", "hla_tests"]
                for target in targets:
                    text = (build / "CMakeFiles" / f"{target}.dir" / "flags.make").read_text()
                    with_pch = set(re.findall(r"^# PCH options: (\S+)_OPTIONS = .*-include", text, re.M))
                    own_opt = {obj for obj, opts in re.findall(r"^# Custom options: (\S+)_OPTIONS = (.*)$", text, re.M)
                               if re.search(r"(^|;)-O", opts)}
                    self.assertGreater(len(with_pch), 0, f"{target}: no unit uses the precompiled header")
                    self.assertEqual(with_pch & own_opt, set(), f"{target}: -O of their own with the header")
                    # and the header itself is built with the target's flags, which the units share
                    self.assertRegex(text, r"(?m)^CXX_FLAGS = ", target)


BUILD = pathlib.Path(os.environ.get("HLA_BUILD", ROOT / "build"))
FUSED_UNIT = BUILD / "CMakeFiles" / "hla_numeric_units.dir" / "generated" / "register_chunked_float.cpp.o"


@unittest.skipUnless(platform.machine() == "x86_64" and shutil.which("objdump") and FUSED_UNIT.exists(),
                     "not an x86-64 build tree with the float chunked unit, or no objdump")
class FusedFormPrefetches(unittest.TestCase):
    """hla2/chunked-fused asks L2 for the next chunk's rows (fast/chunked/hla2_fused.hpp, prefetch_rows). GCC 12
    deleted that loop when it was written with __builtin_prefetch, silently: the form ran without it from its first
    version, and every test passed. So the instruction itself is looked for in the compiled chunk loop."""

    def test_the_chunk_loop_holds_its_prefetch(self):
        asm = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(FUSED_UNIT)], capture_output=True,
                             text=True, check=True).stdout
        body = re.search(r"<hla::fast::chunked::FusedPass<float>::run\(.*?>:\n(.*?)(?:\n\n|\Z)", asm, re.S)
        self.assertIsNotNone(body, "FusedPass<float>::run not found in the float chunked unit")
        self.assertTrue("prefetcht1" in body.group(1), "no prefetcht1 in FusedPass<float>::run: dropped again")


if __name__ == "__main__":
    unittest.main()
