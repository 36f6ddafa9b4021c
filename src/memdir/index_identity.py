"""What an index was built with, and why it must be rebuilt for the settings or this version.

Kept apart from :mod:`memdir.sync` (and free of its imports) so that a search that does not sync,
``memdir search --no-sync`` on the CLI's hot path, can still tell an index built with other
settings from a current one.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memdir.config import Settings
    from memdir.stores.base import Store

#: Bump when chunking or indexing changes in a way that needs a rebuild.
CHUNKER_VERSION = 20  # 9: a lone \r ends a line; 10: notes decoded by their byte order mark, non-UTF-8
# bytes as cp1252, code blocks have no headings; 11: words indexed without invisible characters, in NFC;
# 12: a heading's UTC time (the session hook's captures) dates its lines by the user's day; 13: transcripts
# mask a private key without its END line, leave base64 data-URI payloads out and read lower-case 'z'
# times, '$2000' is no year, long CJK lines sliced anew (an unchanged file, e.g. a rotated transcript,
# kept its old rows for good: the unmasked key stayed searchable); 14: Setext headings are headings,
# front matter is one block with no headings, a long line is cut after a space, 2025\u201103\u201104 is a date,
# a note's data-URI payloads are left out, HTML comment blocks have no headings, an English note's accented
# words are stemmed without their accents; 15: Logseq/Dendron/YYYY/MM/DD journals, front matter dates,
# properties under a title and headings dated in other languages date their lines (version 14 shipped
# without them: an unchanged note kept its old dates); 16: transcripts mask Stripe restricted keys and
# webhook secrets, SendGrid keys, Google OAuth tokens, Slack webhook URLs, Azure account keys, *_PASS=
# and a quoted "Authorization": "Basic …"; 17: full-width and half-width forms and ligatures are indexed as
# their plain letters (NFKC), the Turkish dotless ı as i, Arabic and Hebrew vowel points left out, Greek
# letters without accents and final sigma as σ, Russian ё as е; a name or heading in NFD dates as in NFC;
# a long line of Korean in NFD is never cut inside a syllable; German ß as ss; 18: transcripts mask a key
# written straight after a Chinese, Japanese or Korean letter (我的密钥是sk-…); a piece of a long line is
# never carried into the chunk that goes on with that line (an overlap of half the chunk size or more);
# the stems column holds İstanbul as istanbul, not stanbul; 19: the stems column holds a CamelCase word's
# parts' stems too (OperationalError: oper, error); a curated note's front matter is chunked with its first
# heading and block; 20: a transcript's heartbeat polls answered HEARTBEAT_OK, and replies that are only
# HEARTBEAT_OK or NO_REPLY, are left out of its text; the text column holds the Turkish İ as I (a trigram
# index kept it, a question is lowered to i); a fenced block of base64 alone (an Excalidraw drawing's
# compressed-json) is left out
#: The index's layout: 4: SQLite stores 64-hex chunk ids as 32-byte blobs; 5: no empty embedding
#: cache in a keyword-only SQLite index, meta and files WITHOUT ROWID (a page less each).
INDEX_SCHEMA = 5
#: Index identity keys that follow from the settings alone (compared before every search; the
#: first two, in this order, also lead :meth:`Indexer.rebuild_reason`'s list).
#: sha256 of no extra paths at all: the scope of most indexes, compared before each search without
#: importing hashlib (it loads OpenSSL: about 5 ms on the CLI's hot path).
_NO_EXTRA_PATHS = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
SETTINGS_KEYS = ("schema", "chunker", "sources", "chunkTokens", "chunkOverlap", "ftsTokenizer", "scopeHash",
                 "userTimezone", "sessionsOf")


def changed_reason(key: str, meta: dict[str, Any], ident: dict[str, Any]) -> str:
    """Why a rebuild, as ``status`` and ``memdir index`` say it: the key and both values, but for
    the hash of the extra paths, which says nothing to a reader ("scopeHash changed ('9f…' → …)")."""
    if key == "scopeHash":
        return "extraPaths changed"
    if key == "sessionsOf":  # (agents sharing one store.path take turns: say whose)
        return f"the transcripts are agent {ident.get(key)}'s, not {meta.get(key)}'s (memorySearch.store.path shared)"
    return f"{key} changed ({meta.get(key)!r} → {ident.get(key)!r})"


def settings_identity(settings: Settings) -> dict[str, Any]:
    """The part of an index's identity that follows from the settings alone (no provider needed)."""
    return {**_shaping_identity(settings), "workspace": str(settings.workspace_path)}


def _shaping_identity(settings: Settings) -> dict[str, Any]:
    """:data:`SETTINGS_KEYS`' values for ``settings``; without the workspace, whose path is
    resolved anew at each call (~35 µs of a 0.7 ms warm search) and is no key compared here."""
    ms = settings.memory_search
    scope = _scope_hash(settings, within=True)
    return {
        "schema": INDEX_SCHEMA,
        "chunker": CHUNKER_VERSION,
        "sources": sorted(ms.sources),
        "chunkTokens": ms.chunking.tokens,
        "chunkOverlap": ms.chunking.overlap,
        "ftsTokenizer": ms.store.fts.tokenizer,
        "scopeHash": scope,
        # the zone that gave transcripts' and UTC headings' days: another one re-dates them
        "userTimezone": settings.user_timezone,
        # whose transcripts (agents/<key>/sessions): two agents given one index by a store.path
        # without {agentId} each searched the transcripts the other's last sync had put there
        "sessionsOf": settings.state_key if "sessions" in ms.sources and ms.store.driver == "sqlite" else None,
    }


def _scope_hash(settings: Settings, *, within: bool) -> str:
    """The hash of the extra paths; ``within``: those inside the workspace by their path in it
    (``.``, ``./team-notes``).  Why: one workspace is seen at two paths (a volume two containers
    mount at ``/workspace`` and ``/home/u/ws``, sharing one agent's index), and its ``extraPaths =
    ["."]`` named two folders, so each container's sync rebuilt the whole index ("extraPaths
    changed"), the other's next one again."""
    if not settings.extra_paths:
        return _NO_EXTRA_PATHS
    import hashlib

    names = []
    ws = str(settings.workspace_path)
    for path in settings.extra_paths:
        name = str(path)
        if within and (name == ws or name.startswith(ws.rstrip(os.sep) + os.sep)):
            name = os.path.join(".", os.path.relpath(name, ws)) if name != ws else "."
        names.append(name)
    # (the OS's bytes of each path: a name that is not UTF-8 failed the whole index)
    return hashlib.sha256("\n".join(sorted(names)).encode("utf-8", "surrogateescape")).hexdigest()


def differs(key: str, meta: dict[str, Any], ident: dict[str, Any], settings: Settings) -> bool:
    """Whether the index (``meta``) was built with another ``key`` than ``ident`` says; an index
    whose extra paths were hashed as full paths (memdir before the hash of paths within the
    workspace) is not rebuilt for that alone."""
    if meta.get(key) == ident.get(key):
        return False
    if key == "sessionsOf" and key not in meta:  # an index built before memdir recorded it
        return False
    return not (key == "scopeHash" and meta.get(key) == _scope_hash(settings, within=False))


def settings_rebuild_reason(settings: Settings, store: Store, meta: dict[str, Any]) -> str | None:
    """Why the index must be rebuilt for the settings, whether or not any file changed: another
    chunk size, FTS tokenizer, source set, extraPaths, timezone (or PostgreSQL's
    textSearchConfig).  Cheap (no provider is asked), so a search checks it every time: a
    search after such an edit answered from the old chunks for as long as no note changed,
    and after a tokenizer change ranked them with the wrong tokens.  A provider or model
    change is not here: the search sees those vectors are not the provider's and uses
    keywords, saying so, until a sync rebuilds."""
    ident = _shaping_identity(settings)
    for key in SETTINGS_KEYS:
        if differs(key, meta, ident, settings):
            return changed_reason(key, meta, ident)
    store_reason = getattr(store, "rebuild_reason", None)
    return store_reason() if store_reason is not None else None


def newer_version(meta: dict[str, Any] | None, store: Store | None = None) -> str | None:
    """What of the index a newer memdir wrote than this one knows ("chunker 19; this memdir's is
    18"), or ``None``; ``store``: its backend's own formats too (PostgreSQL's keyword text form, as
    of the ``meta`` it read last).

    Why: an older memdir rebuilt such an index for its own versions ("chunker changed (19 → 18)"),
    and the newer one then rebuilt it back: a watcher or ``memdir mcp`` started before an upgrade
    and the upgraded CLI rebuilt the whole index after each other's every sync, for as long as
    both ran, each saying only "rebuilt once"."""
    for key, ours in (("schema", INDEX_SCHEMA), ("chunker", CHUNKER_VERSION)):
        theirs = (meta or {}).get(key)
        if isinstance(theirs, int) and not isinstance(theirs, bool) and theirs > ours:
            return f"{key} {theirs}; this memdir's is {ours}"
    own = getattr(store, "newer_format", None)
    return own() if own is not None else None


def newer_version_words(location: str, newer: str) -> str:
    """What an older memdir says of an index a newer one wrote (``newer``: :func:`newer_version`)."""
    return (f"the index {location} was written by a newer memdir ({newer}), so this older one leaves it as "
            "it is rather than rebuild it back, which the newer one would undo. A process started before an "
            "upgrade (a `memdir watch`, a `memdir mcp`) still runs the older memdir: restart it; to go back to "
            "this version instead (a downgrade), stop the newer one's processes and run `memdir index --force` "
            "with this one")


#: What to do when an older memdir's index is rebuilt for this one: a process of that memdir still
#: running on it rebuilds it back after each rebuild of this one, while every message said "once".
OLDER_STILL_RUNNING = ("if a process of the older memdir still runs on it (a `memdir watch` or `memdir mcp` started "
                       "before the upgrade, another host sharing the database), restart or upgrade it: it rebuilds "
                       "the index back after each rebuild of this one")


def version_reason(meta: dict[str, Any], store: Store | None = None) -> str | None:
    """Why an index another memdir version wrote (another schema or chunker; ``store``: its
    backend's own formats too, PostgreSQL's keyword text form) must be rebuilt, or ``None``: the
    part of a rebuild reason no setting of this process can explain."""
    newer = newer_version(meta, store)
    if newer is not None:
        return f"written by a newer memdir: {newer}"
    for key, ours in (("schema", INDEX_SCHEMA), ("chunker", CHUNKER_VERSION)):
        if meta.get(key) != ours:
            return f"{key} changed ({meta.get(key)!r} → {ours!r})"
    own = getattr(store, "older_format", None)
    return own() if own is not None else None
