"""A deterministic synthetic memory workspace: years of realistic daily logs, sized in chunks.

Why generated: speed has to be measured at 100k chunks, and no real memory workspace that size
may be shipped.  What makes it realistic enough to time search on: daily files
``memory/YYYY-MM-DD.md`` with headings and bullet lines about people, projects, decisions,
numbers, ticket ids and versions; word frequencies are skewed (a few names and projects come up
all the time, most rarely), so posting lists have the lengths FTS5 meets in real notes.

The same ``(seed, size)`` always yields byte-identical files and the same queries.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memdir.chunking import chunk_markdown

GENERATOR_VERSION = 2

FIRST = ("Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent "
         "Victor Walter Yusuf Zoe Amara Bilal Chen Dmitri Esme Farid Greta Hiro Ines Jonas Kenji Lena Mateo "
         "Nadia Oskar Priya Quinn Rosa Sven Tariq Uma Vera Wen Ximena Yara Zane Anika Bruno Cleo").split()
LAST = ("Okafor Lindqvist Moreau Tanaka Novak Haddad Kowalski Ferreira Nguyen Schmidt Rossi Patel Ivanova "
        "Murphy Costa Jensen Alvarez Becker Dubois Sato").split()
PROJECTS = ("Atlas Heron Juniper Quasar Marlin Cobalt Orchid Tundra Falcon Sequoia Nimbus Basalt Lantern "
            "Meridian Ember Kestrel Obsidian Willow Harbor Pylon Cascade Zephyr Granite Aurora Beacon").split()
COMPONENTS = ("billing service", "auth gateway", "search index", "payment webhook", "mobile app", "data pipeline",
              "feature flag service", "email worker", "export job", "admin dashboard", "rate limiter",
              "session store", "image resizer", "notification queue", "audit log", "CSV importer",
              "onboarding flow", "pricing page", "backup cron", "metrics exporter", "SSO bridge",
              "invoice generator", "cache layer", "GraphQL API", "sync daemon")
TECH = ("PostgreSQL", "SQLite", "Redis", "Kafka", "RabbitMQ", "gRPC", "REST", "Terraform", "Kubernetes", "Nomad",
        "DuckDB", "ClickHouse", "S3", "Cloudflare R2", "OpenTelemetry", "Prometheus", "Grafana", "Sentry",
        "FastAPI", "Django", "Rust", "Go", "TypeScript", "Celery", "Temporal")
ENVS = ("staging", "production", "eu-west", "us-east", "canary", "the test cluster")
REASONS = ("it halves the p95 latency", "the vendor raised prices by 30%", "on-call load was too high",
           "the old library is unmaintained", "customers asked for it twice this week", "it keeps the schema simple",
           "we need audit trails for the SOC 2 review", "the migration risk is lower", "it saves about $400 a month",
           "the benchmark was 3x faster", "legal signed off on it", "nobody understood the old code path")
ACTIONS = ("write the runbook", "rotate the API keys", "add an index on created_at", "review the PR",
           "update the dashboard", "email the customer", "draft the RFC", "book the retro", "bump the dependency",
           "add alerting", "fix the flaky test", "split the migration", "archive the old bucket",
           "load test the endpoint", "document the rollback")
FEELINGS = ("went well", "was tense", "ran over by 20 minutes", "was short", "was productive", "got derailed")
PLACES = ("the Lisbon office", "the cafe downstairs", "Zoom", "the whiteboard room", "Slack huddle", "the offsite")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
SECTIONS = ("## Standup", "## Meetings", "## Decisions", "## Notes", "## Incidents", "## TODO", "## Ideas")


def _zipf(rng: random.Random, items: Sequence[str]) -> str:
    """A skewed pick: item i comes up about 1/(i+1) as often as the first."""
    n = len(items)
    weights = _ZIPF_CACHE.get(n)
    if weights is None:
        weights = _ZIPF_CACHE.setdefault(n, [1.0 / (i + 1) for i in range(n)])
    return rng.choices(items, weights=weights, k=1)[0]


_ZIPF_CACHE: dict[int, list[float]] = {}


class _Writer:
    """Generates one line at a time, recording ids and facts that queries can ask about."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.tickets: list[str] = []

    def person(self) -> str:
        r = self.rng
        return _zipf(r, FIRST) if r.random() < 0.7 else f"{_zipf(r, FIRST)} {r.choice(LAST)}"

    def ticket(self) -> str:
        r = self.rng
        t = f"{r.choice(('INC', 'OPS', 'ENG', 'SUP', 'FIN'))}-{r.randint(1000, 99999)}"
        if r.random() < 0.05:
            self.tickets.append(t)
        return t

    def line(self, day: dt.date) -> str:
        r = self.rng
        p, proj, comp = self.person(), _zipf(r, PROJECTS), _zipf(r, COMPONENTS)
        kind = r.randrange(14)
        hh, mm = r.randint(8, 18), r.choice((0, 5, 10, 15, 20, 30, 40, 45, 50))
        if kind == 0:
            return (f"- {hh:02d}:{mm:02d} Met {p} about {proj}: decided to move the {comp} to {r.choice(TECH)} "
                    f"because {r.choice(REASONS)}.")
        if kind == 1:
            return (f"- {p} reported p95 latency of {r.randint(40, 2400)} ms on the {comp} after the "
                    f"{r.choice(TECH)} upgrade ({self.ticket()}).")
        if kind == 2:
            return f"- TODO: {r.choice(ACTIONS)} for {proj} — owner {p}, due {r.choice(WEEKDAYS)}."
        if kind == 3:
            return (f"- Deployed {comp} v{r.randint(1, 9)}.{r.randint(0, 30)}.{r.randint(0, 12)} to "
                    f"{r.choice(ENVS)}; error rate {r.randint(0, 90) / 10:.1f}% after {r.randint(5, 120)} minutes.")
        if kind == 4:
            return (f"- Decision: use {r.choice(TECH)} instead of {r.choice(TECH)} for the {comp} in {proj}, "
                    f"because {r.choice(REASONS)}. Agreed with {p}.")
        if kind == 5:
            return (f"- 1:1 with {p} at {r.choice(PLACES)} {r.choice(FEELINGS)}; they want to lead {proj} "
                    f"next quarter.")
        if kind == 6:
            return (f"- Incident {self.ticket()}: the {comp} dropped {r.randint(2, 900)} requests between "
                    f"{hh:02d}:{mm:02d} and {hh:02d}:{(mm + 25) % 60:02d}; root cause was a "
                    f"{r.choice(('bad config push', 'full disk', 'expired certificate', 'deadlock', 'DNS change'))}.")
        if kind == 7:
            return (f"- Budget for {proj}: ${r.randint(2, 250)}k approved by {p}; "
                    f"{r.randint(1, 9)} engineers until {r.choice(WEEKDAYS)} {r.randint(1, 28)}.")
        if kind == 8:
            return (f"- {p} prefers {r.choice(TECH)} for new services; remember this when planning "
                    f"{proj}.")
        if kind == 9:
            return (f"- Customer {r.choice(LAST)} Corp asked about the {comp}; promised an answer by "
                    f"{r.choice(WEEKDAYS)} ({self.ticket()}).")
        if kind == 10:
            return f"- Idea: cache the {comp} responses in {r.choice(TECH)} to cut cost by {r.randint(5, 70)}%."
        if kind == 11:
            return (f"- Retro for {proj} {r.choice(FEELINGS)}; action item: {r.choice(ACTIONS)} "
                    f"({p}).")
        if kind == 12:
            return f"- Reviewed {p}'s PR #{r.randint(100, 9999)} on the {comp}: {r.choice(('approved', 'needs tests', 'blocked on design', 'merged'))}."  # noqa: E501
        return (f"- Note from {day.isoformat()}: {p} is out {r.choice(WEEKDAYS)}; {self.person()} covers "
                f"the {comp} on-call.")

    def day_text(self, day: dt.date, target_chars: int) -> str:
        r = self.rng
        out = [f"# {day.isoformat()}", ""]
        size = 0
        while size < target_chars:
            heading = r.choice(SECTIONS)
            out += [heading, ""]
            for _ in range(r.randint(3, 9)):
                line = self.line(day)
                out.append(line)
                size += len(line) + 1
            out.append("")
        return "\n".join(out)


@dataclass
class Corpus:
    """A generated workspace on disk and the questions to time search with."""

    workspace: Path
    files: int
    chunks: int
    chars: int
    queries: list[str]


def default_chunking() -> tuple[int, int]:
    """memdir's default ``(tokens, overlap)``: corpora are sized, and baselines timed, in the
    chunks memdir indexes."""
    from memdir.config import ChunkingConfig

    c = ChunkingConfig()
    return c.tokens, c.overlap


def generate(root: Path, chunks: int, *, seed: int = 42, n_queries: int = 200, tokens: int | None = None,
             overlap: int | None = None) -> Corpus:
    """Write ``root/workspace/memory/*.md`` with about ``chunks`` chunks (memdir's chunker counts,
    at the default chunking unless ``tokens``/``overlap`` are given).

    A ``corpus.json`` manifest lets a later run reuse the files when seed and size match.
    """
    default_tokens, default_overlap = default_chunking()
    tokens = default_tokens if tokens is None else tokens
    overlap = default_overlap if overlap is None else overlap
    root = Path(root)
    manifest = root / "corpus.json"
    key = {"version": GENERATOR_VERSION, "seed": seed, "chunks": chunks, "queries": n_queries,
           "tokens": tokens, "overlap": overlap}
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        if data.get("key") == key:
            return Corpus(root / "workspace", data["files"], data["chunks"], data["chars"], data["queries"])
    ws = root / "workspace"
    mem = ws / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    for old in mem.glob("*.md"):
        old.unlink()
    rng = random.Random(seed)
    writer = _Writer(rng)
    day = dt.date(1990, 1, 1)
    total_chunks = files = chars = 0
    while total_chunks < chunks:
        text = writer.day_text(day, rng.randint(3000, 14000)) + "\n"
        n = sum(1 for c in chunk_markdown(text, tokens, overlap) if c.text.strip())
        (mem / f"{day.isoformat()}.md").write_text(text, encoding="utf-8")
        total_chunks += n
        files += 1
        chars += len(text)
        day += dt.timedelta(days=1)
    (ws / "MEMORY.md").write_text(
        "# Long-term memory\n\n- The team ships on Tuesdays and Thursdays.\n"
        "- Alice owns the billing service; Bob owns the auth gateway.\n", encoding="utf-8")
    queries = make_queries(random.Random(seed + 1), writer.tickets, n_queries)
    manifest.write_text(json.dumps({"key": key, "files": files + 1, "chunks": total_chunks + 1, "chars": chars,
                                    "queries": queries}, indent=1))
    return Corpus(ws, files + 1, total_chunks + 1, chars, queries)


def make_queries(rng: random.Random, tickets: Sequence[str], n: int) -> list[str]:
    """A mix of the questions an agent asks its memory: decisions, people, ids, incidents."""
    forms = (
        lambda: f"what did we decide about the {rng.choice(COMPONENTS)} for {rng.choice(PROJECTS)}?",
        lambda: f"{rng.choice(FIRST)} {rng.choice(PROJECTS)}",
        lambda: rng.choice(tickets) if tickets else "INC-4242",
        lambda: f"when did we deploy the {rng.choice(COMPONENTS)} to {rng.choice(ENVS)}?",
        lambda: f"p95 latency of the {rng.choice(COMPONENTS)} after the {rng.choice(TECH)} upgrade",
        lambda: f"who owns the {rng.choice(PROJECTS)} budget",
        lambda: f"why did we switch to {rng.choice(TECH)}?",
        lambda: f"incident root cause {rng.choice(('expired certificate', 'full disk', 'deadlock', 'DNS change'))}",
        lambda: f"what does {rng.choice(FIRST)} prefer for new services",
        lambda: f"customer {rng.choice(LAST)} Corp question",
    )
    return [forms[i % len(forms)]() for i in range(n)]
