"""Finds the built `veloxquant` module and CLI for the tests.

Order: $VQ_PYTHON_DIR (set by CTest) or the newest build*/python/ under the repository root; the
CLI is $VQ_CLI or bin/veloxquant next to that python/ folder.
"""
import glob
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _module_dir():
    env = os.environ.get("VQ_PYTHON_DIR")
    if env:
        return env
    found = glob.glob(os.path.join(ROOT, "build*", "python", "veloxquant*.so"))
    if not found:
        raise RuntimeError(
            "veloxquant module not found: build with -DVQ_BUILD_PYTHON=ON "
            "(target veloxquant_python) or set VQ_PYTHON_DIR")
    return os.path.dirname(max(found, key=os.path.getmtime))


MODULE_DIR = _module_dir()
sys.path.insert(0, MODULE_DIR)


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("VQ_CLI") or os.path.join(os.path.dirname(MODULE_DIR), "bin", "veloxquant")
    if not os.path.exists(path):
        pytest.skip(f"CLI not built at {path}")
    return path


def pytest_addoption(parser):
    parser.addoption("--models-dir", default=None,
                     help="directory of the real model files (default: $VQ_MODELS_DIR, then "
                          "../shared/models next to the repository)")


@pytest.fixture(scope="session")
def model_file(request):
    """model_file(name): the path of a real model file, or skip the test when it is absent.

    Searched: --models-dir, $VQ_MODELS_DIR, <repository>/../shared/models (the C++ tests' order).
    """
    dirs = [request.config.getoption("--models-dir"), os.environ.get("VQ_MODELS_DIR"),
            os.path.join(os.path.dirname(ROOT), "shared", "models")]

    def find(name):
        for d in dirs:
            if d and os.path.exists(os.path.join(d, name)):
                # The library looks for a .bin model's tokNNN.bin itself ($VQ_MODELS_DIR first):
                # point it at the directory the model came from.
                os.environ["VQ_MODELS_DIR"] = d
                return os.path.join(d, name)
        pytest.skip(f"{name} not found (searched --models-dir, $VQ_MODELS_DIR, "
                    f"../shared/models); see docs/eval.md for where to download it")
    return find
