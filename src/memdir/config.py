"""Typed configuration with OpenClaw's keys and defaults (R§1).

Layers, lowest first: built-in defaults < config file (``memorySearch`` or
``agents.defaults.memorySearch``) < ``agents.list[id=<agent>]`` < environment < CLI flags.
Keys may be camelCase or snake_case; unknown keys are an error that names the key (and
suggests the closest known one).  Every leaf remembers where its value came from so ``memdir
config show`` can say it, and so an invalid value is reported with the file (or environment
variable) that set it.

Values R§1 *clamps* stay clamped (weights normalised to sum 1, ``overlap < tokens``,
``minScore`` in [0, 1], ``candidateMultiplier`` in [1, 20]).  Values that can only be a mistake
are rejected instead of being silently turned into something that disables a feature (OpenClaw
would turn ``maxResults = 0`` into "every search returns nothing"): ``maxResults ≤ 0``,
``chunking.tokens ≤ 0``, ``halfLifeDays ≤ 0``, negative weights, ``cache.maxEntries < 0``,
``searchBudgetMs < 0``, ``watchDebounceMs < 0``, ``sources = []``, an unknown or blank ``provider``, an unknown
``userTimezone``, a blank ``store.path`` or ``mirror.path``, an agent configured twice in ``agents.list``, and an
agent id that is not a plain name (it becomes a file name under the state folder)."""

from __future__ import annotations

import builtins
import difflib
import functools
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from memdir.errors import MemdirError
from memdir.settings_cache import candidate_count, resolve_store_path, unknown_env_warning
from memdir.workspace import fs_name

CONFIG_FILENAMES = ("memdir.toml", "memdir.json", "memdir.json5")
DEFAULT_AGENT_ID = "main"
DEFAULT_STATE_DIR = "~/.memdir"
#: Every ``provider`` / ``fallback`` value memdir understands (the registry builds them; a test
#: keeps the two lists equal).  Kept here so checking a config never imports NumPy.
PROVIDER_IDS = ("auto", "local", "openai", "gemini", "voyage", "mistral", "ollama", "none", "fts-only", "off")


class ConfigError(MemdirError, ValueError):
    """A configuration problem the user must fix; the message names the key or file."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _numeric_only(annotation: Any) -> bool:
    """True for a field that takes a number (``int``, ``float``, also beside ``str`` or ``None``) and
    no boolean: ``forceFlushTranscriptBytes = true`` (``int | str``) was read as 1 byte, a flush a turn."""
    kinds = set(get_args(annotation)) if get_args(annotation) else {annotation}
    return bool(kinds & {int, float}) and bool not in kinds


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=_camel, validate_assignment=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic takes ``true`` as 1 for a number: ``maxResults = true`` would quietly mean 1
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _numeric_only(field.annotation):
            raise ValueError(f"must be a number, not {str(value).lower()}")
        return value


#: The longest timeout a remote call or query embedding may be given (a week): beyond ~10^10 s it
#: overflows the OS's clock types, and every query embedding failed "timestamp out of range".
MAX_WAIT_SECONDS = 7 * 86400


def _clamp(value: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, value))


def did_you_mean(word: str, choices: Any) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        lowered = {str(c).lower(): c for c in choices}
        close = [lowered[m] for m in difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)]
    return f" (did you mean '{close[0]}'?)" if close else ""


#: ``<id>.sqlite.lock`` must fit a file name (255 bytes on most file systems).
MAX_AGENT_ID_BYTES = 200
#: The longest name ``store.path`` may give the index: memdir names files beside it after it with
#: up to 35 bytes more (``.corrupt-<time>-<n>-journal``, ``.tmp-<id>-journal``, ``.vec8.tmp-<pid>-<id>``),
#: and each must fit a file name (255 bytes).  An agent id's index, ``<id>.sqlite``, is shorter.
MAX_INDEX_NAME_BYTES = 215


def check_agent_id(agent_id: str) -> None:
    """An agent id names files (``memory/<id>.sqlite``, ``agents/<id>/``): a plain name only."""
    if not agent_id or not agent_id.strip():
        raise ValueError("an agent id cannot be empty")
    # control and format characters (DEL, C1, a zero-width space, a right-to-left override) too: an
    # id 'main\u200b' made another agent's index and state, shown as "main" wherever it was named
    bad = [c for c in ("/", "\\", "\0") if c in agent_id] or [c for c in agent_id if ord(c) < 32 or c == "\x7f"]
    if not bad and not agent_id.isascii():
        import unicodedata

        bad = [c for c in agent_id if unicodedata.category(c) in ("Cc", "Cf")]
    if bad or agent_id.strip() in (".", "..") or agent_id != agent_id.strip():
        raise ValueError(f"agent id {agent_id!r} is not a plain name: use letters, digits, '-', '_' or '.' "
                         "(not '.' or '..' alone), without '/', '\\' or surrounding spaces")
    # SQLite and the file system then failed with "surrogates not allowed" / "File name too long"
    try:
        size = len(agent_id.encode("utf-8"))
    except UnicodeEncodeError:  # a byte that is not UTF-8, from the command line or environment
        raise ValueError(f"agent id {agent_id!r} is not valid UTF-8 text") from None
    if size > MAX_AGENT_ID_BYTES:
        raise ValueError(f"agent id is too long ({size} bytes; at most {MAX_AGENT_ID_BYTES}: it names files)")


def _composed(agent_id: Any) -> Any:
    """``agent_id`` in composed Unicode (NFC), as agents.list entries are matched by it."""
    if not isinstance(agent_id, str) or agent_id.isascii():
        return agent_id
    import unicodedata

    return unicodedata.normalize("NFC", agent_id)


def agent_spelling(agent_id: str, state_path: Path) -> str:
    """The spelling of ``agent_id`` whose index and state this agent has: 'café' typed (NFC) and
    'café' from a folder name synced from macOS (NFD) look the same wherever they are printed, but
    named two agents (two indexes, transcripts, long-term memories) on file systems that keep
    names as given.  Both reach one agent: the spelling that already has state (composed first,
    then as given, then decomposed), else the composed one."""
    if agent_id.isascii():
        return agent_id
    import unicodedata

    forms = dict.fromkeys((unicodedata.normalize("NFC", agent_id), agent_id, unicodedata.normalize("NFD", agent_id)))
    for form in forms:
        places = (state_path / "memory" / f"{form}.sqlite", state_path / "agents" / form, state_path / "ltm" / form)
        try:
            if any(place.exists() for place in places):
                return form
        except (OSError, ValueError):
            continue
    return next(iter(forms))


# --- memorySearch ---------------------------------------------------------------------------


class BatchConfig(_Model):
    enabled: bool = False
    wait: bool = True
    #: OpenClaw's jobs in flight; accepted (and clamped as OpenClaw does) for its configurations,
    #: but memdir runs one job at a time (each up to 50,000 requests): no effect.
    concurrency: int = 2
    poll_interval_ms: int = 2000
    timeout_minutes: float = Field(60, gt=0)  # NaN or ≤ 0: every batch job timed out at once, or never

    @model_validator(mode="after")
    def _clamp(self) -> BatchConfig:
        self.concurrency = max(1, int(self.concurrency))
        self.poll_interval_ms = max(1, int(self.poll_interval_ms))
        return self


class RemoteConfig(_Model):
    base_url: str | None = None
    #: (Not in the repr, nor the headers: a program printing or logging its settings showed the key.)
    api_key: str | None = Field(None, repr=False)
    headers: dict[str, str] | None = Field(None, repr=False)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    #: One timeout for every remote call; when set it overrides the two below.
    timeout_seconds: float | None = None
    #: Per-attempt timeout of a query embedding (R§5.3: 60 s remote).
    query_timeout_seconds: float = 60
    #: Per-attempt timeout of a document (batch) embedding request (R§5.3: 120 s remote).
    batch_timeout_seconds: float = 120
    #: Retries after the first attempt on 429/5xx/timeouts/connection errors (R§5.3: 3).
    max_retries: int = 3
    #: Longest ``Retry-After`` we wait; a server asking for more fails at once instead.
    retry_after_max_seconds: float = 60
    redact_secrets: bool = False

    @model_validator(mode="after")
    def _clamp(self) -> RemoteConfig:
        self.max_retries = int(_clamp(int(self.max_retries), 0, 10))
        for name in ("query_timeout_seconds", "batch_timeout_seconds", "retry_after_max_seconds"):
            value = float(getattr(self, name))
            if not math.isfinite(value) or not 0 < value <= MAX_WAIT_SECONDS:
                raise ValueError(f"{_camel(name)} must be a positive number of seconds (a week at most)")
        if self.timeout_seconds is not None:
            value = float(self.timeout_seconds)
            if not math.isfinite(value) or not 0 < value <= MAX_WAIT_SECONDS:
                raise ValueError("timeoutSeconds must be a positive number of seconds (a week at most)")
        return self

    @property
    def query_timeout(self) -> float:
        """Seconds one query-embedding attempt may take."""
        return float(self.timeout_seconds or self.query_timeout_seconds)

    @property
    def batch_timeout(self) -> float:
        """Seconds one document-embedding request may take."""
        return float(self.timeout_seconds or self.batch_timeout_seconds)


class LocalConfig(_Model):
    model_path: str | None = None
    model_cache_dir: str | None = None
    threads: int | None = None
    batch_size: int = 16
    #: Run the embedded default model through integer kernels (memdir.embeddings.int8): ~1.4x
    #: faster embeddings, slightly different vectors (LoCoMo dev R@6 vector 0.748 vs 0.751), so off
    #: unless set (None: memdir.embeddings.local.DEFAULT_INTEGER_KERNELS).
    integer_kernels: bool | None = None
    #: Run the embedded default model with fused attention and GELU (memdir.embeddings.fused): same
    #: vectors to float rounding, ~15 % faster queries (None: memdir.embeddings.local.DEFAULT_FUSED_ATTENTION,
    #: on; false runs model.onnx as it is).
    fused_attention: bool | None = None

    @model_validator(mode="after")
    def _clamp(self) -> LocalConfig:
        self.batch_size = max(1, int(self.batch_size))
        if self.threads is not None:
            self.threads = max(1, int(self.threads))
        return self


class ExperimentalConfig(_Model):
    session_memory: bool = False


class VectorStoreConfig(_Model):
    enabled: bool = True
    extension_path: str | None = None


class FtsStoreConfig(_Model):
    tokenizer: Literal["unicode61", "trigram"] = "unicode61"


class PostgresStoreConfig(_Model):
    """``store.postgres``: where in the database memdir's tables live and how it searches them."""

    #: Schema holding memdir's shared tables (one schema serves every agent; see stores/postgres.py).
    db_schema: str = Field("memdir", alias="schema", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    pool_size: int = Field(4, ge=1, le=64)
    #: Keyword stems: "english" (the default) stems as SQLite does (memdir's own, each note in its own
    #: language); another PostgreSQL text search configuration (german, simple, ...) uses its own.
    text_search_config: str = Field("english", pattern=r"^[A-Za-z_][A-Za-z0-9_.]{0,62}$")
    #: An agent's vectors get their own HNSW index from this many on; below it search is exact.
    hnsw_min_vectors: int = Field(20000, ge=0)
    #: Keyword ranking: BM25 as FTS5 computes it (default), or PostgreSQL's ts_rank_cd (for comparison).
    ranking: Literal["bm25", "ts_rank_cd"] = "bm25"


class StoreConfig(_Model):
    driver: Literal["sqlite", "postgres"] = "sqlite"
    path: str | None = None
    #: libpq connection string or URL for ``driver = "postgres"`` (else ``$MEMDIR_DATABASE_URL``, else PG* vars).
    dsn: str | None = Field(None, repr=False)  # (its password: not in the repr)
    postgres: PostgresStoreConfig = Field(default_factory=PostgresStoreConfig)
    vector: VectorStoreConfig = Field(default_factory=VectorStoreConfig)
    fts: FtsStoreConfig = Field(default_factory=FtsStoreConfig)

    @field_validator("path")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        # `MEMDIR_INDEX_PATH=" "` wrote the index to a file named " " in the current folder (the workspace)
        if value is not None and not value.strip():
            raise ValueError("cannot be blank (leave it out for <stateDir>/memory/<agent or workspace>.sqlite)")
        return value


class ChunkingConfig(_Model):
    """Chunk size in tokens (≈ 4 characters each).  Deviation: OpenClaw's 400/80 halved; a result
    is widened to 1600 characters (:attr:`memdir.ranking.Tuning.expand_chars`), so it holds what
    a 400-token chunk did, centred on the small chunk that matched (chosen by cross-validation,
    docs/benchmarks.md)."""

    tokens: int = Field(200, gt=0)
    overlap: int = 40

    @model_validator(mode="after")
    def _clamp(self) -> ChunkingConfig:
        self.tokens = max(1, int(self.tokens))
        self.overlap = int(_clamp(int(self.overlap), 0, self.tokens - 1))
        return self


class SessionSyncConfig(_Model):
    delta_bytes: int = 100_000
    delta_messages: int = 50
    post_compaction_force: bool = True

    @model_validator(mode="after")
    def _clamp(self) -> SessionSyncConfig:
        self.delta_bytes = max(0, int(self.delta_bytes))
        self.delta_messages = max(0, int(self.delta_messages))
        return self


class SyncConfig(_Model):
    on_session_start: bool = True
    on_search: bool = True
    watch: bool = True
    #: ≥ 0, as ``memdir watch --debounce-ms``: -1 was taken as 0 here where the flag refused it
    watch_debounce_ms: int = Field(1500, ge=0)
    interval_minutes: float = 0
    search_budget_ms: int = Field(2000, ge=0)
    sessions: SessionSyncConfig = Field(default_factory=SessionSyncConfig)

    @model_validator(mode="after")
    def _check_interval(self) -> SyncConfig:
        # 0 or less turns the interval sync off (as OpenClaw's), a huge value waits a week; NaN is a typo
        if math.isnan(float(self.interval_minutes)):
            raise ValueError("intervalMinutes must be a number of minutes (0 turns it off)")
        return self


class MmrConfig(_Model):
    enabled: bool = False
    lambda_: float = Field(default=0.7, alias="lambda")

    @model_validator(mode="after")
    def _clamp(self) -> MmrConfig:
        lam = float(self.lambda_)
        self.lambda_ = 0.7 if not math.isfinite(lam) else _clamp(lam, 0.0, 1.0)
        return self


class TemporalDecayConfig(_Model):
    enabled: bool = False
    half_life_days: float = Field(30, gt=0)

    @model_validator(mode="after")
    def _clamp(self) -> TemporalDecayConfig:
        hl = float(self.half_life_days)
        self.half_life_days = 30 if not math.isfinite(hl) else max(1, math.floor(hl))
        return self


class HybridConfig(_Model):
    enabled: bool = True
    #: ``None`` (the default): the weights measured for the embedding model in use
    #: (``memdir.ranking.MODEL_WEIGHTS``; OpenClaw's 0.7/0.3 for models not measured).
    vector_weight: float | None = Field(None, ge=0)
    text_weight: float | None = Field(None, ge=0)
    candidate_multiplier: float = 4
    mmr: MmrConfig = Field(default_factory=MmrConfig)
    temporal_decay: TemporalDecayConfig = Field(default_factory=TemporalDecayConfig)

    @model_validator(mode="after")
    def _normalise(self) -> HybridConfig:
        if self.vector_weight is not None or self.text_weight is not None:
            # One weight given: the other is what is left of 1 (OpenClaw's pair 0.7/0.3 stays 0.7/0.3).
            vw = _clamp(float(1 - self.text_weight if self.vector_weight is None else self.vector_weight), 0.0, 1.0)
            tw = _clamp(float(1 - vw if self.text_weight is None else self.text_weight), 0.0, 1.0)
            total = vw + tw
            self.vector_weight, self.text_weight = (0.7, 0.3) if total <= 0 else (vw / total, tw / total)
        multiplier = float(self.candidate_multiplier)
        if math.isnan(multiplier):  # floor(NaN) said "cannot convert float NaN to integer"; inf is clamped to 20
            raise ValueError("candidateMultiplier must be a number (1 to 20), not NaN")
        self.candidate_multiplier = math.floor(_clamp(multiplier, 1, 20))
        return self


class QueryConfig(_Model):
    max_results: int = Field(6, gt=0)
    min_score: float = 0.35
    hybrid: HybridConfig = Field(default_factory=HybridConfig)
    #: ≤ 0: every remote query embedding 'exceeded 0 ms'; over a week: 'timestamp out of range'
    embed_timeout_ms: int = Field(3000, gt=0, le=MAX_WAIT_SECONDS * 1000)

    @model_validator(mode="after")
    def _clamp(self) -> QueryConfig:
        self.max_results = int(self.max_results)
        if math.isnan(float(self.min_score)):  # clamped, NaN would silently become 0: every result passes
            raise ValueError("minScore must be a number (0 to 1), not NaN")
        self.min_score = _clamp(float(self.min_score), 0.0, 1.0)
        return self

    @property
    def candidates(self) -> int:
        return candidate_count(self.max_results, self.hybrid.candidate_multiplier)


class CacheConfig(_Model):
    enabled: bool = True
    max_entries: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _clamp(self) -> CacheConfig:
        if self.max_entries is not None and math.isfinite(float(self.max_entries)):
            self.max_entries = max(1, math.floor(float(self.max_entries)))
        elif self.max_entries is not None:
            self.max_entries = None
        return self


SOURCES = ("memory", "sessions")


class MemorySearchConfig(_Model):
    enabled: bool = True
    provider: str = "auto"
    model: str = ""
    fallback: str = "none"
    offline: bool = False
    remote: RemoteConfig = Field(default_factory=RemoteConfig)
    local: LocalConfig = Field(default_factory=LocalConfig)
    experimental: ExperimentalConfig = Field(default_factory=ExperimentalConfig)
    sources: list[str] = Field(default_factory=lambda: ["memory"])
    extra_paths: list[str] = Field(default_factory=list)
    store: StoreConfig = Field(default_factory=StoreConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    sync: SyncConfig = Field(default_factory=SyncConfig)
    query: QueryConfig = Field(default_factory=QueryConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)

    @field_validator("provider", "fallback")
    @classmethod
    def _known_provider(cls, value: str) -> str:
        name = (value or "").strip().lower()
        if not name:  # `MEMDIR_PROVIDER=" "` failed every search later: "unknown embedding provider ''"
            raise ValueError(f"cannot be blank: name one of {', '.join(PROVIDER_IDS)}, or leave it out for the default")
        if name not in PROVIDER_IDS:
            raise ValueError(f"unknown embedding provider {value!r}{did_you_mean(name, PROVIDER_IDS)} "
                             f"(expected one of {', '.join(PROVIDER_IDS)})")
        return value

    @field_validator("sources")
    @classmethod
    def _some_source(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError('must name at least one source: ["memory"] (add "sessions" with '
                             "experimental.sessionMemory = true)")
        return value

    @model_validator(mode="after")
    def _normalise(self) -> MemorySearchConfig:
        allowed = {"memory"} | ({"sessions"} if self.experimental.session_memory else set())
        sources: list[str] = []
        for source in self.sources:
            if source not in SOURCES:
                raise ValueError(f"unknown source {source!r} (expected one of {', '.join(SOURCES)})")
            if source in allowed and source not in sources:
                sources.append(source)
        self.sources = sources or ["memory"]
        seen: list[str] = []
        for raw in self.extra_paths:
            item = raw.strip()
            if item and item not in seen:
                seen.append(item)
        self.extra_paths = seen
        return self


# --- other sections ---------------------------------------------------------------------------


class MemorySection(_Model):
    citations: Literal["auto", "on", "off"] = "auto"


class MemoryFlushConfig(_Model):
    enabled: bool = True
    soft_threshold_tokens: int = 4000
    prompt: str | None = None
    system_prompt: str | None = None
    force_flush_transcript_bytes: int | str | None = None

    @model_validator(mode="after")
    def _clamp(self) -> MemoryFlushConfig:
        self.soft_threshold_tokens = max(0, int(self.soft_threshold_tokens))
        return self


class CompactionConfig(_Model):
    reserve_tokens_floor: int = 20_000
    memory_flush: MemoryFlushConfig = Field(default_factory=MemoryFlushConfig)

    @model_validator(mode="after")
    def _clamp(self) -> CompactionConfig:
        self.reserve_tokens_floor = max(0, int(self.reserve_tokens_floor))
        return self


DEFAULT_CONTEXT_TOKENS = 200_000


class SessionMemoryHookConfig(_Model):
    """OpenClaw's ``hooks.internal.entries.session-memory`` (R§13)."""

    enabled: bool = True
    messages: int = 15
    llm_slug: bool = True

    @model_validator(mode="after")
    def _clamp(self) -> SessionMemoryHookConfig:
        # R§13 step 4: a number > 0, else the default 15.
        self.messages = int(self.messages) if int(self.messages) > 0 else 15
        return self


class HooksConfig(_Model):
    session_memory: SessionMemoryHookConfig = Field(default_factory=SessionMemoryHookConfig)


class LtmEmbeddingConfig(_Model):
    """``longTermMemory.embedding``: which model embeds long-term memories (R§14 plus memdir's providers).

    Unset fields inherit ``memorySearch`` (the embedded local model by default).  String values may
    use ``${ENV}``; they are resolved when long-term memory is used, not when config is read.
    """

    provider: str | None = None
    model: str | None = None
    api_key: str | None = Field(None, repr=False)
    base_url: str | None = None
    #: The vector width the model must produce (R§14 needs it for unknown models); checked, not sent.
    dimensions: int | None = Field(None, gt=0)


class LtmMirrorConfig(_Model):
    """A Markdown copy of the active long-term memories kept in the workspace (opt-in)."""

    enabled: bool = False
    #: Workspace-relative or absolute; ``{agentId}`` is replaced by ``Settings.state_key`` (for agents sharing a
    #: workspace).
    path: str = "memory/long-term.md"

    @field_validator("path")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        # "" resolved to the workspace folder itself, which was moved aside as an edited mirror
        if not value.strip():
            raise ValueError("cannot be blank (leave it out for memory/long-term.md)")
        return value


class LongTermMemoryConfig(_Model):
    """``longTermMemory``: OpenClaw's ``memory-lancedb`` plugin settings (R§14) and memdir's additions."""

    #: Offer memory_recall/memory_store/memory_forget (MCP, agent loop) and run auto-recall/capture.
    enabled: bool = False
    embedding: LtmEmbeddingConfig = Field(default_factory=LtmEmbeddingConfig)
    #: Default ``<stateDir>/ltm/<state key>`` (the agent id, else the workspace key); ``{agentId}`` is replaced
    #: by that key, ``~`` and ``${ENV}`` expanded.
    db_path: str | None = None
    auto_capture: bool = False
    auto_recall: bool = True
    capture_max_chars: int | float = 500
    #: ``cosine`` (default) or ``openclaw`` (``1/(1+squared L2)``, R§14's exact scale); see memdir.ltm.
    scoring: Literal["cosine", "openclaw"] = "cosine"
    #: Mark an older memory of the same category with similarity 0.8–0.95 as superseded by a new one.
    supersede: bool = True
    mirror: LtmMirrorConfig = Field(default_factory=LtmMirrorConfig)

    @model_validator(mode="after")
    def _clamp(self) -> LongTermMemoryConfig:
        # R§14: an integer floored into [100, 10000].
        value = self.capture_max_chars  # (not float(): a JSON integer of 400 digits failed every command with
        # "int too large to convert to float", no configuration error)
        finite = not isinstance(value, float) or math.isfinite(value)
        self.capture_max_chars = int(_clamp(math.floor(value), 100, 10_000)) if finite else 500
        return self


class AgentDefaults(_Model):
    memory_search: MemorySearchConfig = Field(default_factory=MemorySearchConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    user_timezone: str | None = None
    workspace: str | None = None
    context_tokens: int | None = None


class AgentEntry(_Model):
    id: str
    workspace: str | None = None
    memory_search: MemorySearchConfig | None = None


class AgentsConfig(_Model):
    defaults: AgentDefaults = Field(default_factory=AgentDefaults)
    entries: builtins.list[AgentEntry] = Field(default_factory=builtins.list, alias="list")


class Settings(_Model):
    """The resolved configuration for one agent and workspace."""

    state_dir: str = DEFAULT_STATE_DIR
    workspace: str = "."
    agent_id: str = DEFAULT_AGENT_ID
    memory_search: MemorySearchConfig = Field(default_factory=MemorySearchConfig)
    memory: MemorySection = Field(default_factory=MemorySection)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    user_timezone: str | None = None
    # R§11.2: model context tokens ?? agent contextTokens ?? 200000.
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    hooks: HooksConfig = Field(default_factory=HooksConfig)
    long_term_memory: LongTermMemoryConfig = Field(default_factory=LongTermMemoryConfig)
    #: Whether the agent id was chosen (flag, ``MEMDIR_AGENT``, config file, argument) or is the
    #: default; without a chosen id the index is keyed by the workspace (see ``index_path``).
    _agent_explicit: bool = PrivateAttr(default=True)
    #: ``(inputs, key)`` of the last :attr:`state_key` worked out without an agent id.
    _state_key_cache: tuple[tuple[str, str, str | None], str] | None = PrivateAttr(default=None)

    @field_validator("agent_id")
    @classmethod
    def _plain_agent_id(cls, value: str) -> str:
        check_agent_id(value)
        return value

    @field_validator("state_dir", "workspace")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        # "" resolved to the current folder: `--state-dir "$UNSET"` put the index inside the
        # workspace's memory/ folder, `-w "$UNSET"` indexed wherever the command ran
        if not value.strip():
            raise ValueError("cannot be empty (leave it out for the default)")
        return value

    @field_validator("user_timezone")
    @classmethod
    def _known_timezone(cls, value: str | None) -> str | None:
        # an unknown zone silently meant the machine's: "yesterday" in a search and the day a note
        # was filed under could be a day off without a word ('Europe' even failed every dated search)
        from memdir.timezones import unknown_timezone

        problem = unknown_timezone(value)
        if problem:
            from zoneinfo import available_timezones

            raise ValueError(problem + did_you_mean(str(value).strip(), available_timezones()))
        # trimmed, as resolve_timezone reads it: long-term memory's dates took " UTC " for unknown
        return value.strip() or None if value else None

    @model_validator(mode="after")
    def _clamp_context(self) -> Settings:
        self.context_tokens = max(1, int(self.context_tokens))
        self._agent_explicit = "agent_id" in self.model_fields_set
        return self

    # -- derived paths -------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return Path(os.path.expanduser(fs_name(self.state_dir))).resolve()

    @property
    def workspace_path(self) -> Path:
        return Path(listed_case(str(Path(os.path.expanduser(fs_name(self.workspace))).resolve())))

    @property
    def agent_explicit(self) -> bool:
        return self._agent_explicit

    @property
    def index_key(self) -> Literal["path", "agent", "workspace"]:
        """What names the index file: ``store.path``, the chosen agent id, or the workspace."""
        if self.memory_search.store.path:
            return "path"
        return "agent" if self._agent_explicit else "workspace"

    @property
    def index_path(self) -> Path:
        if self.index_key == "workspace":
            return self.state_path / "memory" / f"{workspace_index_name(self.workspace_path)}.sqlite"
        return resolve_store_path(self.memory_search.store.path, self.state_key, self.state_path)

    @property
    def workspace_key(self) -> str:
        """The workspace's own key (``<folder-name>-<hash>``), whatever names its state now."""
        return workspace_index_name(self.workspace_path)

    @property
    def state_key(self) -> str:
        """The name of this agent's own state: ``agents/<key>/sessions``, ``ltm/<key>`` and
        ``{agentId}`` in configured paths.  The chosen agent id (OpenClaw's per-agent state), else
        the workspace's key, as for the index, so two workspaces never share transcripts or
        memories; ``main`` for the workspace that used it before (see :mod:`memdir.state_key`)."""
        if self._agent_explicit:
            return self.agent_id
        inputs = (str(self.state_path), str(self.workspace_path), self.memory_search.store.path)
        if self._state_key_cache is None or self._state_key_cache[0] != inputs:
            from memdir.state_key import LEGACY_AGENT_ID, uses_legacy_state

            own = self.workspace_key
            legacy_index = resolve_store_path(self.memory_search.store.path, LEGACY_AGENT_ID, self.state_path)
            legacy = uses_legacy_state(self.state_path, self.workspace_path, own, legacy_index)
            self._state_key_cache = (inputs, LEGACY_AGENT_ID if legacy else own)
        return self._state_key_cache[1]

    @property
    def state_key_kind(self) -> Literal["agent", "workspace", "legacy"]:
        """Why :attr:`state_key` is what it is: a chosen agent id, the workspace, or agent ``main``'s
        state from before memdir keyed state by workspace."""
        if self._agent_explicit:
            return "agent"
        return "legacy" if self.state_key == DEFAULT_AGENT_ID else "workspace"  # a workspace key has a hash

    @property
    def sessions_dir(self) -> Path:
        return self.state_path / "agents" / self.state_key / "sessions"

    @property
    def extra_paths(self) -> list[Path]:
        """extraPaths resolved: ``~`` expanded, relative to the workspace (fixes #58027)."""
        out: list[Path] = []
        for raw in self.memory_search.extra_paths:
            p = self._extra_path(raw)
            if "\\" in raw and not os.path.lexists(p):
                # a path written on Windows (notes\\team): a backslash is a name's character here,
                # but as it is no such file exists, and its notes were searched nowhere
                slashed = self._extra_path(raw.replace("\\", "/"))
                p = slashed if os.path.lexists(slashed) else p
            if p not in out:
                out.append(p)
        return out


    def _extra_path(self, raw: str) -> Path:
        p = Path(os.path.expanduser(fs_name(raw)))  # (a config file's text: not the OS's name under ASCII)
        p = p if p.is_absolute() else self.workspace_path / p
        return _existing_form(Path(os.path.normpath(p)))


def _existing_form(path: Path) -> Path:
    """``path``, or its name in the other Unicode normal form when only that one exists: a folder
    synced from macOS is named in NFD, the same name typed into a config file in NFC, and the extra
    path was "missing" (its notes searched nowhere) though ``ls`` showed it by the same name."""
    text = str(path)
    if text.isascii() or os.path.lexists(path):
        return path
    import unicodedata

    for form in ("NFC", "NFD"):
        other = unicodedata.normalize(form, text)
        if other != text and os.path.lexists(other):
            return Path(other)
    return path


@functools.lru_cache(maxsize=64)
def listed_case(path: str) -> str:
    """``path`` (absolute, resolved) with each name as its folder lists it, where the file system
    ignores case (macOS, a USB drive's exFAT): ``~/Notes`` typed for ``~/notes``.

    Why: the index, transcripts and long-term memory of a workspace are keyed by its path, and
    ``memdir -w ~/Notes`` built a second index of the same notes, its memories and transcripts
    apart from those ``-w ~/notes`` (or the MCP server configured so) had stored, as if gone.
    A name is looked up in its folder only where the name in the other case exists too (one
    ``lstat`` that fails, on a file system that keeps case); kept as given when it cannot be
    listed, or is listed as given."""
    parts = Path(path).parts
    if len(parts) < 2:
        return path
    out = parts[0]
    for part in parts[1:]:
        other = part.swapcase()
        if other != part and os.path.lexists(os.path.join(out, other)):
            try:
                names = os.listdir(out)
            except OSError:
                names = []
            if part not in names:
                spelt = [n for n in names if n.lower() == part.lower()]
                part = spelt[0] if len(spelt) == 1 else part
        out = os.path.join(out, part)
    return out


def workspace_index_name(workspace: Path) -> str:
    """``<folder-name>-<10 hex of SHA-256(resolved path)>``: readable in ``ls``, unique per folder.

    Used when no agent id was chosen, so indexing a second workspace never collides with the
    first (OpenClaw keys the index by agent id alone, which made ``memdir -w other index`` fail
    after the quick start).
    """
    resolved = str(workspace.resolve())
    slug = re.sub(r"[^a-z0-9]+", "-", workspace.name.lower()).strip("-")[:40] or "workspace"
    return f"{slug}-{hashlib.sha256(resolved.encode('utf-8', 'surrogateescape')).hexdigest()[:10]}"


# --- loading ---------------------------------------------------------------------------------

Origins = dict[str, str]


def _field_for(model: type[BaseModel], key: str) -> tuple[str, Any] | None:
    fields = model.model_fields
    if key in fields:
        return key, fields[key]
    for name, info in fields.items():
        if info.alias == key:
            return name, info
    return None


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def prefix(dotted: str) -> str:
    """``a.b.c`` → ``a.b.`` (the section a key lives in)."""
    return dotted.rpartition(".")[0] + "." if "." in dotted else ""


def _in_file(path: Path | None) -> str:
    return f" in {path}" if path is not None else ""


def _key_paths(model: type[BaseModel], head: str = "") -> list[str]:
    """Every key under ``model`` as a user writes it (``query.hybrid.vectorWeight``), sections too;
    not into lists (``agents.list``), whose items have an index."""
    out: list[str] = []
    for name, info in model.model_fields.items():
        path = f"{head}{info.alias or _camel(name)}"
        out.append(path)
        sub = _submodel(info.annotation)
        if sub is not None and get_origin(info.annotation) is not builtins.list:
            out.extend(_key_paths(sub, path + "."))
    return out


def _placed_elsewhere(model: type[BaseModel], key: str, where: str) -> str | None:
    """The full key a known name is at when given in the wrong section: ``maxResults`` under
    ``[memorySearch]`` is ``memorySearch.query.maxResults``, a top-level ``provider`` is
    ``memorySearch.provider``.  Looked for under this section first, then from the top; the
    shortest such key wins.  (Only the closest spelling *here* was suggested, so the commonest
    mistake, a right name in the wrong table, got none, or one that was another setting.)"""
    wanted = _camel(key).lower()

    def shortest(paths: list[str]) -> str | None:
        hits = [p for p in paths if p.rpartition(".")[2].lower() == wanted]
        return min(hits, key=lambda p: (p.count("."), len(p))) if hits else None

    below = shortest([p for p in _key_paths(model) if "." in p])
    if below is not None:
        return f"{where}.{below}" if where else below
    anywhere = shortest(_key_paths(FileConfig))
    return anywhere if anywhere is not None and anywhere != (f"{where}.{key}" if where else key) else None


#: Settings OpenClaw's agents have that are not memory's, passed over in an ``agents`` block even
#: where one of memdir's keys is spelt alike (``model`` is the chat model there, not
#: ``memorySearch.model``; ``default`` marks the default agent).
OPENCLAW_AGENT_KEYS = frozenset({"model", "models", "name", "default", "identity", "tools", "heartbeat",
                                 "sandbox", "subagents", "groupChat", "agentDir", "skills"})


def normalise_keys(model: type[BaseModel], raw: Any, where: str, where_file: Path | None = None) -> dict[str, Any]:
    """Map camelCase/snake_case keys onto field names; raise on unknown keys, naming them."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where or 'config'}{_in_file(where_file)}: expected a table/object, "
                          f"got {type(raw).__name__}")
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in raw.items():
        found = _field_for(model, str(key))
        dotted = f"{where}.{key}" if where else str(key)
        if found is None:
            spellings = {n: info.alias or n for n, info in model.model_fields.items()}
            spellings.update({alias: alias for alias in spellings.values()})
            close = difflib.get_close_matches(str(key), list(spellings), n=1, cutoff=0.6)
            elsewhere = _placed_elsewhere(model, str(key), where)
            if model in (AgentDefaults, AgentEntry) and (
                    _camel(str(key)) in OPENCLAW_AGENT_KEYS or (not close and elsewhere is None)):
                # OpenClaw's own settings of an agent (model, name, tools, sandbox…) in an `agents`
                # block copied from its config: not memory's, passed over (a near miss of one of
                # memdir's keys is still refused).  Each was "unknown config key", so the README's
                # "the whole OpenClaw agents shape is accepted" was not so.
                continue
            hint = (f" (did you mean '{elsewhere}'?)" if elsewhere else
                    f" (did you mean '{prefix(dotted)}{spellings[close[0]]}'?)" if close else "")
            known = ", ".join(sorted(set(spellings.values())))
            raise ConfigError(f"unknown config key '{dotted}'{hint}{_in_file(where_file)} (known keys here: {known})")
        name, info = found
        if name in out:  # memorySearch and memory_search: the later replaced the earlier, silently
            raise ConfigError(f"{prefix(dotted)}{info.alias or name} is set twice{_in_file(where_file)} (as "
                              f"'{spelled[name]}' and '{key}'): keep one spelling")
        spelled[name] = str(key)
        if any(isinstance(v, str) and "\0" in v for v in (value if isinstance(value, list) else [value])):
            # a JSON "\u0000" passes the file's own NUL check; as a path it failed later, unnamed
            raise ConfigError(f"{dotted}{_in_file(where_file)}: contains a NUL byte")
        sub = _submodel(info.annotation)
        many = get_origin(info.annotation) is list
        if sub is not None and value is not None:
            # A section of the wrong shape is named here: ``agents`` never reaches the validator.
            if many and isinstance(value, list):
                value = [normalise_keys(sub, v, f"{dotted}[{i}]", where_file) for i, v in enumerate(value)]
            elif not many and isinstance(value, Mapping):
                value = normalise_keys(sub, value, dotted, where_file)
            else:
                want = "a list of tables/objects" if many else "a table/object"
                raise ConfigError(f"{dotted}{_in_file(where_file)}: expected {want}, got {type(value).__name__}")
        out[name] = value
    return out


def _merge(
    base: dict[str, Any], over: Mapping[str, Any], origins: Origins, origin: str, prefix: str = ""
) -> None:
    for key, value in over.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(base.get(key), dict) and key != "headers":
            _merge(base[key], value, origins, origin, path + ".")
        elif key == "extra_paths" and isinstance(value, list) and isinstance(base.get(key), list):
            base[key] = [*base[key], *value]  # R§1: extraPaths concatenate (defaults + overrides)
            origins[path] = origin
        else:
            base[key] = value.copy() if isinstance(value, dict) else value
            _mark(origins, path, value, origin)


def _mark(origins: Origins, path: str, value: Any, origin: str) -> None:
    if isinstance(value, Mapping) and path.split(".")[-1] != "headers":
        for k, v in value.items():
            _mark(origins, f"{path}.{k}", v, origin)
    else:
        origins[path] = origin


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a TOML, JSON or JSON5 file; errors name the file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    from memdir.reading import note_encoding

    encoding = note_encoding(raw)
    try:
        # a BOM (Windows editors add one) is not an error, and one of UTF-16 says how to read the
        # rest: Windows PowerShell's `>` and Notepad's "Unicode" write it, and such a file was
        # "not UTF-8 text (byte 0: b'\xff'); is it the right file?"
        text = raw.decode("utf-8-sig") if encoding == "utf-8" else raw[2:].decode(encoding)
    except UnicodeDecodeError as exc:
        start = exc.start + (0 if encoding == "utf-8" else 2)
        raise ConfigError(f"config file {path} is not {encoding.upper()} text (byte {start}: "
                          f"{raw[start:start + 1]!r}); is it the right file?") from None
    if "\0" in text:
        raise ConfigError(f"config file {path} holds binary data (a NUL byte); is it the right file?")
    suffix = path.suffix.lower()  # memdir.TOML is TOML too
    try:
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_keys)
        else:
            import json5

            data = json5.loads(text, object_pairs_hook=_unique_keys)
    except Exception as exc:
        # the format is the name's: a TOML file named `config` failed as JSON5 with no word of it
        how = "" if suffix in (".toml", ".json", ".json5") else (
            " as JSON5 (the format follows the name: .toml, .json or .json5)")
        raise ConfigError(f"cannot parse config file {path}{how}: {_parse_problem(exc, suffix, text)}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table/object at the top level")
    return data


#: json5's way of placing a syntax error: ``<string>:4 Unexpected "x" at column 5``.
_JSON5_PLACE = re.compile(r"<string>:(\d+) (.*) at column (\d+)", re.DOTALL)


def _parse_problem(exc: Exception, suffix: str, text: str) -> str:
    """A parser's message, placed as TOML's are (``at line 4, column 5``: json5 said ``<string>:4 …
    at column 5``), with a hint for a JSON file holding comments (only JSON5 takes them)."""
    message = str(exc)
    placed = _JSON5_PLACE.fullmatch(message)
    if placed:
        message = f"{placed[2]} (at line {placed[1]}, column {placed[3]})"
    if suffix == ".json" and re.search(r"^\s*(//|/\*)", text, re.MULTILINE):
        message += " (JSON has no comments: name the file memdir.json5 to keep them)"
    return message


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different: with a key given twice, JSON keeps the last and the
    first section was dropped without a word (TOML refuses it already)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object (the first would be ignored: merge them)")
        out[key] = value
    return out


_NAMED_IGNORED: set[Path] = set()


def find_config_file(workspace: Path, state_dir: Path) -> Path | None:
    """The first config file in the workspace, then the state folder.  One that is there but is no
    file (a broken symlink, a folder, a FIFO) is an error: it was passed over without a word, and
    the next one, or none, used instead.  Another config file beside the one read is named on
    stderr: edits to it changed nothing, without a word."""
    for folder in (workspace, state_dir):
        try:
            os.stat(folder / CONFIG_FILENAMES[0])
        except PermissionError:
            # a folder this user cannot enter (one 'sudo memdir' made private): Python's bare
            # "[Errno 13] Permission denied: '<folder>/memdir.toml'" named neither it nor the fix
            from memdir.stores.sqlite_health import folder_refused

            what = "the workspace" if folder == workspace else "the state folder"
            why = folder_refused(folder) or f"{folder}: permission denied"
            raise ConfigError(f"cannot look for a config file in {what}: {why}") from None
        except OSError:
            pass
        for i, name in enumerate(CONFIG_FILENAMES):
            candidate = folder / name
            if candidate.is_file():
                ignored = [other for other in CONFIG_FILENAMES[i + 1:] if (folder / other).is_file()]
                if ignored and candidate not in _NAMED_IGNORED:  # once a process (settings load twice)
                    _NAMED_IGNORED.add(candidate)
                    import logging

                    logging.getLogger("memdir").warning(
                        "%s is ignored: %s is read (the first of %s); merge them into one",
                        " and ".join(str(folder / other) for other in ignored), name, ", ".join(CONFIG_FILENAMES))
                return candidate
            if os.path.lexists(candidate):
                what = ("a symlink to nothing" if not candidate.exists() else
                        "a directory" if candidate.is_dir() else "not a regular file")
                raise ConfigError(f"config file {candidate} is {what}: make it a file or remove it")
    return None


class FileConfig(_Model):
    """The shape of a config file."""

    state_dir: str | None = None
    workspace: str | None = None
    agent_id: str | None = None
    memory_search: MemorySearchConfig | None = None
    memory: MemorySection | None = None
    compaction: CompactionConfig | None = None
    user_timezone: str | None = None
    context_tokens: int | None = None
    hooks: HooksConfig | None = None
    long_term_memory: LongTermMemoryConfig | None = None
    agents: AgentsConfig | None = None


ENV_KEYS: dict[str, tuple[str, Any]] = {
    "MEMDIR_STATE_DIR": ("state_dir", str),
    "MEMDIR_WORKSPACE": ("workspace", str),
    "MEMDIR_AGENT": ("agent_id", str),
    "MEMDIR_PROVIDER": ("memory_search.provider", str),
    "MEMDIR_MODEL": ("memory_search.model", str),
    "MEMDIR_FALLBACK": ("memory_search.fallback", str),
    "MEMDIR_OFFLINE": ("memory_search.offline", "bool"),
    "MEMDIR_INDEX_PATH": ("memory_search.store.path", str),
    "MEMDIR_STORE_DRIVER": ("memory_search.store.driver", str),
    "MEMDIR_DATABASE_URL": ("memory_search.store.dsn", str),
    "MEMDIR_PG_SCHEMA": ("memory_search.store.postgres.db_schema", str),
    "MEMDIR_CITATIONS": ("memory.citations", str),
    "MEMDIR_USER_TIMEZONE": ("user_timezone", str),
}


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    head, _, rest = dotted.partition(".")
    return {head: _nest(rest, value) if rest else value}


def _parse_bool(name: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"environment variable {name}={raw!r} is not a boolean")


class LoadedConfig:
    """Resolved settings plus where each leaf came from."""

    def __init__(self, settings: Settings, origins: Origins, config_file: Path | None,
                 probes: list[tuple[str, bool]] | None = None):
        self.settings = settings
        self.origins = origins
        self.config_file = config_file
        #: ``(path, existed)`` for each path whose existence decided a setting (a relative
        #: ``local.modelPath``: beside the config file, else a hub name); a settings snapshot is
        #: good only while each still is, or is not, there.
        self.probes: list[tuple[str, bool]] = probes or []

    def _index_location(self) -> str:
        """Where the index lives: the SQLite file, or the PostgreSQL database and agent key (no password),
        as ``status`` names it; the SQLite path shown for a PostgreSQL store was a file never used."""
        store = self.settings.memory_search.store
        if store.driver != "postgres":
            return str(self.settings.index_path)
        from memdir.stores import postgres_agent_key
        from memdir.stores.pgconn import redact_dsn, resolve_dsn

        try:
            where = redact_dsn(resolve_dsn(store.dsn), store.postgres.db_schema)
        except ImportError:  # psycopg missing: status and index say how to install it
            where = f"postgresql://?#{store.postgres.db_schema}"
        return f"{where}/{postgres_agent_key(self.settings)}"

    def rows(self) -> list[tuple[str, Any, str]]:
        """Flattened ``(camelCaseKey, value, origin)`` rows for ``config show``."""
        rows: list[tuple[str, Any, str]] = []

        def walk(model: BaseModel, prefix: str, camel_prefix: str) -> None:
            for name, info in type(model).model_fields.items():
                value = getattr(model, name)
                key = f"{prefix}{name}"
                camel = f"{camel_prefix}{info.alias or name}"
                if isinstance(value, BaseModel):
                    walk(value, key + ".", camel + ".")
                else:
                    rows.append((camel, _shown(name, value), self.origins.get(key, "default")))

        walk(self.settings, "", "")
        rows.append(("indexPath", self._index_location(), "derived"))
        rows.append(("stateKey", self.settings.state_key, "derived"))
        rows.append(("sessionsDir", str(self.settings.sessions_dir), "derived"))
        return rows


#: Header names whose values are credentials (``Authorization``, ``X-Api-Key``, ``Cookie``, ...).
_SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie|password", re.IGNORECASE)


def _is_secret(loc: tuple[Any, ...]) -> bool:
    """Whether a setting at ``loc`` is a credential or may hold one (a key, a DSN, a base URL with
    ``user:password@``, a credential header): its value is never quoted in an error."""
    names = [str(p) for p in loc]
    if any(n in ("api_key", "dsn", "base_url") for n in names):
        return True
    return "headers" in names[:-1] and bool(_SECRET_HEADER.search(names[names.index("headers") + 1]))


def _shown(name: str, value: Any) -> Any:
    """A setting as ``config show`` prints it: credentials masked (its output gets pasted into bug
    reports), a ``${VAR}`` reference kept, since it is no secret and says where the key comes from."""
    if name == "dsn" and isinstance(value, str):
        return mask_dsn_password(value)
    if name == "base_url" and isinstance(value, str):
        from memdir.redact import shown_url

        return shown_url(value)  # https://user:token@proxy/v1: a password as much as the key
    if name == "api_key" and isinstance(value, str) and value and not re.fullmatch(r"\$\{\w+\}", value.strip()):
        return "***"
    if name == "headers" and isinstance(value, Mapping):
        return {k: "***" if _SECRET_HEADER.search(str(k)) else v for k, v in value.items()}
    return value


def mask_dsn_password(dsn: str) -> str:
    """A connection string with its password replaced by ``***`` (URL or ``key=value`` form)."""
    dsn = re.sub(r"(://[^:/@?#]*:)[^/?#]*@", r"\1***@", dsn)
    return re.sub(r"(\b\w*password\s*=\s*)('[^']*'|[^\s&]+)", r"\1***", dsn)  # sslpassword too


def load_config(
    *,
    config_path: str | os.PathLike[str] | None = None,
    workspace: str | os.PathLike[str] | None = None,
    agent_id: str | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    check_workspace: bool = True,
) -> LoadedConfig:
    """Resolve settings from defaults, a config file, the environment and explicit arguments.

    ``overrides`` is a nested mapping (camel or snake keys) applied last, as CLI flags are.
    A workspace folder that does not exist is an error (``check_workspace=False`` skips that,
    for callers that only want to inspect settings).  A relative workspace, state dir or
    ``store.path`` is taken from the current folder now, once: a later ``os.chdir`` does not move it.
    """
    env = os.environ if env is None else env
    misspelt = unknown_env_warning(env)
    if misspelt:
        import logging

        logging.getLogger("memdir").warning("%s", misspelt)
    workspace, state_dir, config_path = (_path_argument(key, value) for key, value in (
        ("workspace", workspace), ("state_dir", state_dir), ("config_path", config_path)))
    if isinstance(agent_id, bytes):  # (a Redis client's answer): str(b"ops") was agent "b'ops'", another index
        agent_id = os.fsdecode(agent_id)
    elif agent_id is not None and not isinstance(agent_id, str):
        raise ConfigError(f"agent id must be text (a str), not {type(agent_id).__name__}: {agent_id!r}"[:200])
    for key, given in (("workspace", workspace), ("agent_id", agent_id), ("state_dir", state_dir),
                       ("config_path", config_path)):
        if given is not None and "\0" in str(given):
            raise ConfigError(f"{key.replace('_', ' ')} {str(given)!r} contains a NUL byte")
    if config_path is not None and not config_path.strip():
        # "" meant no file given: `-c "$UNSET"` read whichever memdir.toml was found instead (and
        # `-w ""` / `--state-dir ""` are refused, for the same reason, by Settings)
        raise ConfigError("invalid configuration: config file (given as --config): cannot be empty (leave it out "
                          "for the default)")
    origins: Origins = {}
    data: dict[str, Any] = Settings().model_dump()

    # Where to look for a config file depends on workspace/state dir from flags or env.
    ws_hint = Path(os.path.expanduser(str(workspace or env.get("MEMDIR_WORKSPACE") or "."))).resolve()
    sd_hint = Path(os.path.expanduser(str(state_dir or env.get("MEMDIR_STATE_DIR") or DEFAULT_STATE_DIR)))
    explicit = config_path or env.get("MEMDIR_CONFIG")
    cfg_file: Path | None
    if explicit:
        cfg_file = Path(os.path.expanduser(str(explicit)))
        if cfg_file.is_dir():
            raise ConfigError(f"config file {cfg_file} is a directory: give the path of a file in it "
                              "(memdir.toml, memdir.json or memdir.json5)")
        if cfg_file.exists() and not cfg_file.is_file():
            raise ConfigError(f"config file {cfg_file} is not a regular file")
        if not cfg_file.is_file():
            raise ConfigError(f"config file not found: {cfg_file}")
    else:
        cfg_file = find_config_file(ws_hint, sd_hint)

    file_agents: dict[str, Any] | None = None
    probes: list[tuple[str, bool]] = []
    if cfg_file is not None:
        raw = normalise_keys(FileConfig, read_config_file(cfg_file), "", cfg_file)
        origin = f"file:{cfg_file}"
        file_agents = raw.pop("agents", None)
        if file_agents:
            defaults = dict(file_agents.get("defaults") or {})
            ms = defaults.pop("memory_search", None)
            if ms:
                _merge(data, {"memory_search": ms}, origins, origin)
            _merge(data, defaults, origins, origin)
        _merge(data, raw, origins, origin)

    env_layer: dict[str, Any] = {}
    env_origins: dict[str, str] = {}
    for name, (dotted, kind) in ENV_KEYS.items():
        if name in env and env[name] != "":
            value = _parse_bool(name, env[name]) if kind == "bool" else env[name]
            _merge(env_layer, _nest(dotted, value), env_origins, f"env:{name}")
    flag_layer: dict[str, Any] = {}
    if overrides:
        flag_layer = normalise_keys(Settings, overrides, "")
    for key, value in (("workspace", workspace), ("agent_id", agent_id), ("state_dir", state_dir)):
        if value is not None:
            flag_layer[key] = str(value)

    # The agent id decides which agents.list entry applies, so settle it before that layer.
    agent = flag_layer.get("agent_id") or env_layer.get("agent_id") or data.get("agent_id")
    if file_agents:
        first_at: dict[str, int] = {}
        for i, entry in enumerate(file_agents.get("entries") or []):
            if not isinstance(entry.get("id"), str) or not entry["id"].strip():  # it applied to no agent, silently
                raise ConfigError(f"agents.list[{i}]{_in_file(cfg_file)}: needs an id, the agent it configures "
                                  f"(a name such as \"main\"), not {entry.get('id')!r}")
            try:  # an id no agent can have ('ops ' copied with its space) applied to none, silently
                check_agent_id(entry["id"])
            except ValueError as exc:
                raise ConfigError(f"agents.list[{i}].id{_in_file(cfg_file)}: {exc}: no agent id names this "
                                  "entry") from None
            composed = _composed(entry["id"])  # (one agent in either Unicode form: agent_spelling)
            if composed in first_at:  # both applied, the later's values quietly replacing the earlier's
                raise ConfigError(f"agents.list[{i}]{_in_file(cfg_file)}: agent {entry['id']!r} is configured "
                                  f"twice (also agents.list[{first_at[composed]}]): merge the two entries")
            first_at[composed] = i
            if composed == _composed(agent):
                origin = f"file:{cfg_file} (agents.list[{agent}])"
                if entry.get("memory_search"):
                    _merge(data, {"memory_search": entry["memory_search"]}, origins, origin)
                if entry.get("workspace"):
                    _merge(data, {"workspace": entry["workspace"]}, origins, origin)

    for key, origin in env_origins.items():
        origins[key] = origin
    _deep_update(data, env_layer)
    _merge(data, flag_layer, origins, "flag")

    _check_drive_letters(data, origins)
    # Relative paths in a config file are relative to the file's folder.
    if cfg_file is not None:
        for key in ("workspace", "state_dir"):
            value = data[key]  # an empty or non-string value is left for validation to name
            if (origins.get(key, "").startswith("file:") and isinstance(value, str) and value.strip()
                    and not os.path.isabs(os.path.expanduser(value))):
                data[key] = str((cfg_file.parent / value).resolve())
        probes = _local_paths_beside(data, origins, cfg_file)
        _store_path_beside(data, origins, cfg_file)
    store = data.get("memory_search", {}).get("store") if isinstance(data.get("memory_search"), dict) else None
    for holder, key in ((data, "workspace"), (data, "state_dir"), (store, "path")):
        value = holder.get(key) if isinstance(holder, dict) else None
        if (isinstance(value, str) and value.strip() and not value.startswith("~")  # (~ unexpandable: _check_home)
                and not os.path.isabs(value)):
            # Pinned to the folder it was given in: relative, a Memory followed the process's
            # chdir, reading and appending to another folder's notes beside the first one's index.
            holder[key] = os.path.abspath(value)  # type: ignore[index]
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe_validation(exc, data, origins)) from None
    settings._agent_explicit = "agent_id" in origins
    if settings._agent_explicit:
        settings.agent_id = agent_spelling(settings.agent_id, settings.state_path)
    _check_home(settings, origins)
    store = settings.memory_search.store
    if store.path and store.driver == "sqlite" and settings.index_path.suffix.lower() == ".md":
        # A Markdown file is memory: opened as an index, the self-heal would move the note aside.
        origin = _origin_text(origins.get("memory_search.store.path", ""))
        raise ConfigError(f"memorySearch.store.path = {store.path!r}{origin} is a Markdown file "
                          f"({settings.index_path}); the index must not be a memory file: use a .sqlite path")
    if store.path and len(os.fsencode(settings.index_path.name)) > MAX_INDEX_NAME_BYTES:
        # A first build failed "[Errno 36] File name too long: '….sqlite.tmp-f72d33cc9af5'", and
        # a name a few bytes longer "unable to open database file", though the index's own fitted.
        origin = _origin_text(origins.get("memory_search.store.path", ""))
        raise ConfigError(f"memorySearch.store.path = {store.path!r}{origin} names an index file of "
                          f"{len(os.fsencode(settings.index_path.name))} bytes; at most {MAX_INDEX_NAME_BYTES}: "
                          "memdir keeps files named after it beside it (….sqlite-wal, ….sqlite.lock, "
                          "….sqlite.tmp-…), and a file name has at most 255 bytes")
    if check_workspace:
        ws = settings.workspace_path
        if not ws.is_dir():
            what = "is not a folder" if ws.exists() else "does not exist"
            raise ConfigError(f"workspace {ws} {what}{_origin_text(origins.get('workspace', ''), 'workspace')}"
                              f"{_other_normal_form(ws)}")
    return LoadedConfig(settings, origins, cfg_file, probes)


def _other_normal_form(path: Path) -> str:
    """``"; …/café (another Unicode form of the name) exists"`` when only the folder spelled the other
    way exists: names copied from macOS are decomposed (NFD), a typed path composed (NFC), and the
    two looked the same in the "does not exist" message and in ``ls``."""
    import unicodedata

    text = str(path)
    if text.isascii():
        return ""
    for form in ("NFC", "NFD"):
        other = unicodedata.normalize(form, text)
        if other != text and os.path.isdir(other):
            return (f"; {other!a} exists, named in another Unicode form ({form}, as copied from macOS): give the "
                    "path as the shell completes it (Tab), or rename the folder")
    return ""


def _path_argument(key: str, value: Any) -> str | None:
    """A path argument as text: ``str``, ``bytes`` or ``os.PathLike`` (``None`` stays ``None``);
    anything else is a :class:`ConfigError` naming it (``str(b"/ws")`` was a folder "b'/ws'")."""
    if value is None:
        return None
    try:
        return os.fsdecode(value)
    except TypeError:
        raise ConfigError(f"{key.replace('_', ' ')} must be a path (a str or os.PathLike), not "
                          f"{type(value).__name__}") from None


def _local_paths_beside(data: dict[str, Any], origins: Origins, cfg_file: Path) -> list[tuple[str, bool]]:
    """``local.modelPath`` / ``local.modelCacheDir`` relative to the config file's folder, as the
    other paths in it: a model found only from the CWD of the first run was lost to a later one
    (an MCP client starts the server elsewhere) and every search fell back to keywords.  A model
    path is taken beside the file only when it is there: else it may name a Hugging Face model.
    Returns the ``(path, existed)`` probes that decided it (see :attr:`LoadedConfig.probes`)."""
    local = (data.get("memory_search") or {}).get("local")
    probes: list[tuple[str, bool]] = []
    if not isinstance(local, dict):
        return probes
    for key in ("model_path", "model_cache_dir"):
        value = local.get(key)
        if not (origins.get(f"memory_search.local.{key}", "").startswith("file:") and isinstance(value, str)
                and value.strip() and not os.path.isabs(os.path.expanduser(value.strip()))):
            continue
        beside = Path(os.path.abspath(cfg_file.parent / value.strip()))  # symlinks kept (HF cache layouts)
        if key == "model_path":
            probes.append((str(beside), beside.exists()))
        if key == "model_cache_dir" or beside.exists():
            local[key] = str(beside)
    return probes


def _store_path_beside(data: dict[str, Any], origins: Origins, cfg_file: Path) -> None:
    """A relative ``store.path`` from a config file, from that file's folder, as its other paths: it
    was taken from the current folder of each run, so ``path = "indexes/{agentId}.sqlite"`` in
    ``~/.memdir/memdir.toml`` gave every folder memdir ran in an index of its own (an MCP client
    starting the server elsewhere rebuilt a new one, beside the CLI's)."""
    store = (data.get("memory_search") or {}).get("store")
    value = store.get("path") if isinstance(store, dict) else None
    if (origins.get("memory_search.store.path", "").startswith("file:") and isinstance(value, str)
            and value.strip() and not value.startswith("~") and not os.path.isabs(value)):
        store["path"] = os.path.abspath(cfg_file.parent / value)  # type: ignore[index]


#: A path as written on Windows: a drive letter, then a separator or nothing.
_DRIVE = re.compile(r"([A-Za-z]):(?:[\\/](.*))?", re.DOTALL)
#: The settings that name a file or folder memdir writes or reads as a whole.
_PATH_KEYS = ("workspace", "state_dir", "memory_search.store.path", "memory_search.local.model_cache_dir",
              "long_term_memory.db_path", "long_term_memory.mirror.path")


def _check_drive_letters(data: dict[str, Any], origins: Origins) -> None:
    """Refuse a path written on Windows (``stateDir = "D:\\memdir"``, a config copied from such a
    machine): relative here, it became a file or folder named ``D:\\memdir`` in the workspace (or
    wherever memdir ran), where the index or the state was written, and synced back to Windows as
    a name it refuses.  (``extraPaths`` only reads: a drive there is said by ``index``.)"""
    for key in _PATH_KEYS:
        holder: Any = data
        for part in key.split("."):
            holder = holder.get(part) if isinstance(holder, dict) else None
        m = _DRIVE.fullmatch(holder) if isinstance(holder, str) else None
        if m is None or os.path.lexists(holder):  # (a folder named so here is that folder)
            continue
        rest = (m[2] or "").replace("\\", "/").strip("/")
        raise ConfigError(f"{_config_key(tuple(key.split('.')))} = {holder!r}{_origin_text(origins.get(key, ''), key)} "
                          f"is a Windows path: '{m[1]}:' names no drive here; give the path where that drive is "
                          f"mounted (under WSL: /mnt/{m[1].lower()}{'/' + rest if rest else ''})")


def _check_home(settings: Settings, origins: Origins) -> None:
    """Refuse a ``~`` path that cannot be expanded (no ``$HOME`` and no passwd entry: a container
    run as a bare uid): ``os.path.expanduser`` leaves it as is, so ``~/.memdir`` became a folder
    named ``~`` in whatever directory memdir ran in."""
    ms = settings.memory_search
    paths = [("state_dir", settings.state_dir), ("workspace", settings.workspace),
             ("memory_search.store.path", ms.store.path), *(("memory_search.extra_paths", p) for p in ms.extra_paths)]
    for key, value in paths:
        if value and value.startswith("~") and os.path.expanduser(value).startswith("~"):
            origin = origins.get(key, "")
            hint = " (set MEMDIR_STATE_DIR or --state-dir)" if key == "state_dir" and not origin else ""
            user = value[1:].split("/", 1)[0]
            # ("~nosuchuser/x" was said to have no home directory, as if $HOME were unset)
            why = f"'~{user}' cannot be expanded, there is no user {user!r}" if user else (
                "'~' cannot be expanded, the home directory is unknown")
            raise ConfigError(f"{_config_key(tuple(key.split('.')))} = {value!r}{_origin_text(origin, key)}: "
                              f"{why}{hint}; give a full path")


def _deep_update(base: dict[str, Any], over: Mapping[str, Any]) -> None:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value


_FLAG_NAMES = {"workspace": "--workspace", "agent_id": "--agent", "state_dir": "--state-dir"}


def _origin_text(origin: str, key: str = "") -> str:
    """Where a value was set, as a phrase: `` in /x/memdir.toml``, `` from $MEMDIR_AGENT``."""
    if origin.startswith("file:"):
        return f" in {origin[5:]}"
    if origin.startswith("env:"):
        return f" from ${origin[4:]}"
    if origin == "flag":
        return f" (given as {_FLAG_NAMES[key]})" if key in _FLAG_NAMES else " (given as an option)"
    return ""


def _config_key(loc: tuple[Any, ...]) -> str:
    """The key a user writes for a validation error's location: each field's alias (``schema``,
    not the attribute ``db_schema``), camelCase otherwise, list indexes in brackets."""
    parts: list[str] = []
    model: type[BaseModel] | None = Settings
    for p in loc:
        if not isinstance(p, str):
            parts.append(f"[{p}]")
            continue
        info = model.model_fields.get(p) if model is not None else None
        parts.append(info.alias if info is not None and info.alias else _camel(p))
        model = _submodel(info.annotation) if info is not None else None
    return ".".join(parts)


def _describe_validation(exc: ValidationError, data: Mapping[str, Any] | None = None,
                         origins: Origins | None = None) -> str:
    """One line per bad value: its camelCase key, the value, where it was set, and why."""
    parts = []
    for err in exc.errors():
        loc = err["loc"]
        key = _config_key(loc)
        dotted = ".".join(str(p) for p in loc if isinstance(p, str))
        where = ""
        if origins is not None:
            # a model-level check reports the section; look for the first leaf set under it
            origin = origins.get(dotted) or next((o for k, o in origins.items() if k.startswith(dotted + ".")), "")
            outer = dotted.split(".")
            while not origin and len(outer) > 1:  # inside a value kept whole: remote.headers.<name>
                outer.pop()
                origin = origins.get(".".join(outer), "")
            where = _origin_text(origin, dotted)
        msg = str(err["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
        # a section given as null or a number: "a valid dictionary or instance of RemoteConfig" named a class
        msg = re.sub(r"a valid dictionary( or instance of \w+)?", "a table/object", msg)
        value = ""
        if "input" in err and err.get("type") != "value_error" and not isinstance(err["input"], Mapping):
            value = f" = {err['input']!r}"
            if _is_secret(loc):  # apiKey = ["sk-…"] printed the key it refused
                value = f" = ({type(err['input']).__name__}, not shown)"
        parts.append(f"{key or 'config'}{value}{where}: {msg}")
    return "invalid configuration: " + "; ".join(parts)


_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_FACTORS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3,
            "gb": 1024**3, "t": 1024**4, "tb": 1024**4}


def parse_byte_size(value: int | float | str | None, default: int) -> int:
    """``"2mb"`` → 2097152 (1024-based); ``0`` disables; unparsable → ``default`` (R§11.3)."""
    if value is None:
        return default
    if isinstance(value, int):  # (math.isfinite of an int of 400 digits: OverflowError)
        return max(0, value)
    if isinstance(value, float):
        return max(0, int(value)) if math.isfinite(value) else default
    match = _UNIT.match(str(value))
    if not match or match.group(2).lower() not in _FACTORS:
        return default
    return int(float(match.group(1)) * _FACTORS[match.group(2).lower()])
