"""Builds the pybind11 module hla_harness with the project's own CMake build (python/hla_harness.cpp over
hla_core), so that `pip install --no-build-isolation .` installs exactly what `make build` builds.

The build tree is build/ in this checkout (HLA_BUILD_DIR overrides): after `make build` only the module's
link is left to do. A build tree configured for another interpreter gets a tree of its own (build-py-<tag>).
"""
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        build = pathlib.Path(os.environ.get("HLA_BUILD_DIR", ROOT / "build"))
        cache = build / "CMakeCache.txt"
        if cache.exists() and f"Python3_EXECUTABLE:FILEPATH={sys.executable}" not in cache.read_text() \
                and not list((build / "python").glob(f"hla_harness{suffix}")):
            build = ROOT / f"build-py-{sys.implementation.cache_tag}"
        if not (build / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                            f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "hla_harness", "-j", str(os.cpu_count() or 1)],
                       check=True)
        built = build / "python" / f"hla_harness{suffix}"
        if not built.exists():
            raise RuntimeError(f"CMake did not produce {built}")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


# setuptools' own scratch goes under build/ (ignored), beside CMake's tree, not into the checkout.
(ROOT / "build").mkdir(exist_ok=True)
setup(ext_modules=[Extension("hla_harness", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": str(ROOT / "build" / "setuptools")},
               "egg_info": {"egg_base": str(ROOT / "build")}})
