"""Builds the C core and the C++ shim with the repository's Makefile (using
the Python that runs this build to find torch), then packages torchtpu.

    pip install -e . --no-build-isolation
"""
import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))


def run_make():
    jobs = os.environ.get("TORCHTPU_BUILD_JOBS", "2")
    subprocess.check_call(["make", f"-j{jobs}", f"PYTHON={sys.executable}", "all"], cwd=ROOT)


class BuildPy(build_py):
    def run(self):
        run_make()
        super().run()


class EditableWheel(editable_wheel):
    # setuptools ignores failures of build_py in editable mode: build here so
    # that a failed build fails the install.
    def run(self):
        run_make()
        super().run()


setup(cmdclass={"build_py": BuildPy, "editable_wheel": EditableWheel})
