"""Copies ../build/libcomfuse.so (run `make` first) into the package at build time, and
records that build directory as a second place to look for it."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.normpath(os.path.join(HERE, "..", os.environ.get("BUILD", "build")))


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib = os.path.join(BUILD, "libcomfuse.so")
        dest = os.path.join(self.build_lib, "comfuse")
        if not os.path.exists(lib):
            raise SystemExit("comfuse: %s not found: run `make` in the repository first" % lib)
        shutil.copy2(lib, os.path.join(dest, "libcomfuse.so"))
        with open(os.path.join(dest, "_build_info.py"), "w") as f:
            f.write("# Written by setup.py at install time.\nBUILD_DIR = %r\n" % BUILD)


setup(cmdclass={"build_py": BuildWithLibrary})
