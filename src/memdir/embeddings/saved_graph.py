"""onnxruntime's already-optimised graph of the embedded model, saved once in the user cache.

Why: a fresh CLI process spends ~220 ms building the session of ``model.onnx``, mostly graph
optimisation and constant-folding the int8 weights' dequantisation back to fp32.  Saving the
graph onnxruntime produced (``optimized_model_filepath`` at the portable EXTENDED level, fp32
weights in an external data file that onnxruntime memory-maps) and loading that instead takes
~45 ms, with bit-identical outputs, so vectors and the provider key stay the same.

The graph is written while the session is built anyway (first use), into a private temporary
folder that is renamed into place with its sidecar (``meta.json``): concurrent builders are
safe (the first rename wins, the others discard theirs).  The folder is keyed by the source
model's SHA-256, the onnxruntime version and :data:`FORMAT_VERSION`, so a stale one is ignored.
On load the sidecar's sizes/mtimes are compared (cheap) and one fixed probe text is run: its
output must hash to what the original model gave when the graph was saved, bit for bit.  Any
mismatch or error means the original model runs (and the folder is rebuilt; after repeated
probe mismatches with intact files, no more attempts for that key).  An unwritable cache only
means no saved graph.  ``MEMDIR_SAVED_GRAPH=0`` turns it off (debugging, benchmarks).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from memdir.atomic_write import hold_temp, writer_gone
from memdir.embeddings.int8 import cache_dir

#: Bumped when the layout, the save options or the probe change: older folders are ignored.
FORMAT_VERSION = 1
#: Text whose output (hashed) proves a loaded graph computes what the original model does.
PROBE_TEXT = "memdir probe: Caroline met Melanie at the pottery class on 7 May 2023, café ☕."
MODEL_NAME = "model.onnx"
DATA_NAME = "weights.data"
META_NAME = "meta.json"
#: A saved graph of another onnxruntime version (or format) unused this long is removed when a new one is saved.
STALE_AFTER_S = 7 * 24 * 3600
#: A leftover (staging folder, temporary file) whose writer may still run is removed after this long.
LEFTOVER_AFTER_S = 3600
#: Probe mismatches (files intact) after which a key is no longer rebuilt.
MAX_MISMATCHES = 2
_ENV_SWITCH = "MEMDIR_SAVED_GRAPH"


def enabled() -> bool:
    """Off only when ``MEMDIR_SAVED_GRAPH`` is ``0``/``false``/``no``/``off``."""
    return os.environ.get(_ENV_SWITCH, "").strip().lower() not in ("0", "false", "no", "off")


def graph_dir(source_sha256: str, ort_version: str, folder: Path | None = None) -> Path:
    """Where the saved graph of the model with this SHA-256, for this onnxruntime, lives."""
    safe_version = "".join(c if c.isalnum() or c in ".-" else "_" for c in ort_version)
    name = f"minilm-{source_sha256[:32]}-ort{safe_version}-graph-v{FORMAT_VERSION}"
    return (folder or cache_dir()) / "models" / name


def _mismatch_marker(path: Path) -> Path:
    return path.with_name(path.name + ".mismatches")


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def find(source_sha256: str, ort_version: str, folder: Path | None = None) -> tuple[Path, str] | None:
    """(model file, expected probe hash) when the saved graph is there and its files look intact."""
    try:
        path = graph_dir(source_sha256, ort_version, folder)
        meta = json.loads((path / META_NAME).read_text(encoding="utf-8"))
        if (
            not isinstance(meta, dict)
            or meta.get("format") != FORMAT_VERSION
            or meta.get("source_sha256") != source_sha256
            or meta.get("ort_version") != ort_version
            or not isinstance(meta.get("probe_sha256"), str)
            or not isinstance(meta.get("files"), dict)
            or sorted(meta["files"]) != sorted(p.name for p in path.iterdir() if p.name != META_NAME)
            or any(_stat(path / name) != value for name, value in meta["files"].items())
        ):
            return None
    except (OSError, ValueError):
        return None
    return path / MODEL_NAME, meta["probe_sha256"]


def may_build(source_sha256: str, ort_version: str, folder: Path | None = None) -> bool:
    """False after :data:`MAX_MISMATCHES` probe mismatches of intact files for this key."""
    try:
        count = int(_mismatch_marker(graph_dir(source_sha256, ort_version, folder)).read_text() or 0)
    except (OSError, ValueError):
        return True
    return count < MAX_MISMATCHES


def note_mismatch(source_sha256: str, ort_version: str, folder: Path | None = None) -> None:
    """Count a probe mismatch of an intact saved graph (best effort)."""
    marker = _mismatch_marker(graph_dir(source_sha256, ort_version, folder))
    try:
        count = int(marker.read_text() or 0)
    except (OSError, ValueError):
        count = 0
    with contextlib.suppress(OSError):
        marker.write_text(str(count + 1))


def start_build(source_sha256: str, ort_version: str, folder: Path | None = None) -> Path | None:
    """A private temporary folder next to the final one to save into, or None (cache unwritable)."""
    try:
        final = graph_dir(source_sha256, ort_version, folder)
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(final.parent)  # a builder killed mid-save left its folder (40-90 MB) for ever
        while True:
            staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.{os.getpid()}.", suffix=".tmp", dir=final.parent))
            fd = os.open(staging, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            if hold_temp(fd, str(staging)):  # (held until finished or abandoned: a container sharing
                _held[str(staging)] = fd  # the cache cannot see this pid, see remove_leftovers)
                return staging
    except OSError:
        return None


#: Staging folders being built here, with the descriptor holding each one's lock.
_held: dict[str, int] = {}


def _let_go(staging: Path) -> None:
    fd = _held.pop(str(staging), None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def save_options(opts: Any, ort: Any, staging: Path) -> None:
    """Make a session being built write its optimised graph into ``staging`` (weights external)."""
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(staging / MODEL_NAME)
    opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA_NAME)
    opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")


def _remove(path: Path) -> None:
    """Move ``path`` aside (atomic) and delete it, so no reader sees it half-deleted."""
    try:
        trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".old", dir=path.parent))
    except OSError:
        return
    try:
        os.replace(path, trash / "x")
    except OSError:
        pass  # another process removed it first: the empty trash folder must not stay behind
    shutil.rmtree(trash, ignore_errors=True)


def discard(source_sha256: str, ort_version: str, folder: Path | None = None) -> None:
    """Remove a damaged or stale saved graph (best effort)."""
    path = graph_dir(source_sha256, ort_version, folder)
    if path.exists():
        _remove(path)


def finish_build(staging: Path, source_sha256: str, ort_version: str, probe_sha256: str,
                 folder: Path | None = None) -> bool:
    """Write the sidecar and rename ``staging`` into place; False (staging removed) if another
    process got there first or anything failed."""
    final = graph_dir(source_sha256, ort_version, folder)
    try:
        files = {p.name: _stat(p) for p in staging.iterdir()}
        if MODEL_NAME not in files:
            raise OSError("onnxruntime wrote no optimised model")
        # No fsync of the 90 MB of weights (it would slow the first run): after a crash, a file
        # that lost its data fails the size check or the probe and is rebuilt.
        meta = {"format": FORMAT_VERSION, "source_sha256": source_sha256, "ort_version": ort_version,
                "probe_sha256": probe_sha256, "files": files}
        with open(staging / META_NAME, "w", encoding="utf-8") as fh:
            json.dump(meta, fh)
        if final.exists():
            _remove(final)  # damaged or stale (the caller found it unusable)
        os.rename(staging, final)  # fails if another builder's folder is already there
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return False
    finally:
        _let_go(staging)
    _remove_stale(final, source_sha256)
    remove_leftovers(final.parent)
    return True


def remove_leftovers(folder: Path) -> None:
    """Delete what killed processes left in the model cache: staging folders (up to 90 MB each),
    half-deleted ``.old`` folders and temporary files (:mod:`memdir.atomic_write`), named
    ``.<name>.<pid>.<random>.tmp|.old`` by their writer.  One whose writer is gone is removed; one of
    a live process (or of a writer whose pid it does not name) only after :data:`LEFTOVER_AFTER_S`."""
    import time

    cutoff = time.time() - LEFTOVER_AFTER_S
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if not (entry.name.startswith(".minilm-") and entry.name.endswith((".tmp", ".old"))):
            continue
        try:
            if not _writer_gone(entry.name, entry.path) and entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass  # another process removed it first


def _writer_gone(name: str, path: str) -> bool:
    """True when ``name`` (``.<name>.<pid>.<random>.<ext>``, at ``path``) names a process that no
    longer runs, and none holds the file (a container's sharing the cache: :func:`writer_gone`)."""
    parts = name.rsplit(".", 3)
    if len(parts) < 4 or not parts[1].isdigit() or sys.platform == "win32":  # (signal 0 is Ctrl-C there)
        return False
    return writer_gone(int(parts[1]), path)


def touch(model_file: Path) -> None:
    """Mark a saved graph as in use (its sidecar's mtime), so :func:`_remove_stale` keeps it."""
    with contextlib.suppress(OSError):
        os.utime(model_file.parent / META_NAME)


def _remove_stale(current: Path, source_sha256: str) -> None:
    """Delete saved graphs of this model for other onnxruntime versions or formats, unused for
    :data:`STALE_AFTER_S` (another environment sharing the cache may still use a recent one)."""
    import time

    cutoff = time.time() - STALE_AFTER_S
    for other in current.parent.glob(f"minilm-{source_sha256[:32]}-ort*-graph-v*"):
        if other == current or other.name.startswith(".") or not other.is_dir():
            continue
        try:
            if (other / META_NAME).stat().st_mtime >= cutoff:
                continue
        except OSError:
            pass  # no sidecar: a damaged leftover
        _remove(other)


def abandon(staging: Path | None) -> None:
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
        _let_go(staging)
