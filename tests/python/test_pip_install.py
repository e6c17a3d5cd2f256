"""Python users install the module the way Python users do (docs/build.md): `pip install --no-build-isolation .`
into a venv builds hla_harness with Debian's setuptools and this checkout's CMake build, downloading nothing
(--no-index), and a user's pytest test (examples/test_hla2_with_pytest.py) calls hla_harness.verify from it."""
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("HLA_BUILD", ROOT / "build"))
PYTHON = "/usr/bin/python3"  # Debian's, with numpy, torch and pytest (scripts/install-deps.sh test tier)


def have(module):
    return subprocess.run([PYTHON, "-c", f"import {module}"], capture_output=True).returncode == 0


@unittest.skipUnless((BUILD / "CMakeCache.txt").exists(), "no configured build tree")
class PipInstallIntoVenv(unittest.TestCase):
    def test_pip_install_then_a_users_pytest(self):
        for m in ("venv", "pytest", "torch", "setuptools"):
            if not have(m):
                self.fail(f"{m} missing: `make test` installs it (scripts/install-deps.sh test)")
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="hla-pip-"))
        try:
            venv = tmp / "venv"
            subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", str(venv)], check=True)
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
            env["HLA_BUILD_DIR"] = str(BUILD)
            pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-build-isolation",
                                  "--no-index", "--quiet", str(ROOT)], env=env, capture_output=True, text=True)
            self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
            where = subprocess.run([str(venv / "bin" / "python"), "-c",
                                    "import hla_harness; print(hla_harness.__file__)"],
                                   env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout.strip()
            self.assertTrue(where.startswith(str(venv)), where)  # the venv's copy, not build/python
            shutil.copy(ROOT / "examples" / "test_hla2_with_pytest.py", tmp)
            shutil.copy(ROOT / "examples" / "torch_hla2_chunked.py", tmp)
            run = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  "test_hla2_with_pytest.py"], env=env, cwd=tmp, capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertRegex(run.stdout, r"\b2 passed\b")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
