"""What an index holds, table by table, as digests: two indexes of one corpus must agree.

    python bench/index_digest.py INDEX.sqlite [OTHER.sqlite]    # exit 1 when the two differ

Compared: ``chunks`` (every column but ``updated_at``, by rowid), ``files``, ``meta`` (without
the build time and the vector epoch, new at every build), ``embedding_cache``, and the keyword
index's logical content through ``fts5vocab`` (every token instance: term, row, column, offset)
plus its per-row token counts and row/token totals.  FTS5's segment layout (how many segments,
which merges ran) is not compared: it depends on how the rows were batched, not on what they are.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from memdir import db

_QUERIES = {
    # ids as text whichever way the index stores them (64-hex ids as blobs since schema 4)
    "chunks": "SELECT rowid, CASE typeof(id) WHEN 'blob' THEN lower(hex(id)) ELSE id END, path, source, start_line, "
              "end_line, hash, model, text, embedding, ts, date_start, date_end FROM chunks ORDER BY rowid",
    "files": "SELECT path, source, hash, mtime, size FROM files ORDER BY path, source",
    "meta": "SELECT key, value FROM meta WHERE key NOT LIKE '%epoch%' ORDER BY key",
    "embedding_cache": "SELECT provider, model, provider_key, hash, embedding, dims FROM embedding_cache "
                       "ORDER BY provider, model, provider_key, hash",
    "fts_instances": "SELECT term, doc, col, offset FROM temp.digest_vocab",  # term, doc, col, offset order
    "fts_docsize": "SELECT id, sz FROM chunks_fts_docsize ORDER BY id",
    "fts_config": "SELECT k, v FROM chunks_fts_config ORDER BY k",
}


def digest(path: str) -> dict[str, Any]:
    conn = db.binding().connect(path)
    conn.execute("CREATE VIRTUAL TABLE temp.digest_vocab USING fts5vocab(main, chunks_fts, instance)")
    out: dict[str, Any] = {}
    for name, sql in _QUERIES.items():
        h = hashlib.sha256()
        n = 0
        if name == "embedding_cache" and conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'embedding_cache'").fetchone() is None:
            sql = "SELECT 1 WHERE 0"  # a keyword-only index has no cache table (schema 5): no rows
        for row in conn.execute(sql):
            if name == "meta" and row[0] == "memory_index_meta_v1":
                meta = json.loads(row[1])
                meta.pop("builtAt", None)
                row = (row[0], json.dumps(meta, sort_keys=True))
            h.update(repr(row).encode())
            n += 1
        out[name] = f"{n} rows {h.hexdigest()[:16]}"
    # row count and token totals per column (FTS5's BM25 inputs), decoded from the averages record
    blob = conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()[0]
    out["fts_averages"] = hashlib.sha256(blob).hexdigest()[:16]
    conn.close()
    return out


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    digests = [digest(p) for p in argv]
    for key in digests[0]:
        vals = [d[key] for d in digests]
        mark = "" if len(set(vals)) == 1 else "   <-- DIFFERS"
        print(f"{key:16s} " + "  |  ".join(vals) + mark)
    return 0 if all(d == digests[0] for d in digests) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
