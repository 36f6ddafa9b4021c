"""Note vaults of real tools in extraPaths (Obsidian, Logseq, Foam/Dendron, Notion's export): a
page is found as its tool shows it.

Real files in temp folders, real SQLite, keyword-only settings (no model).
"""

from __future__ import annotations

from pathlib import Path

from memdir.api import Memory


def vault_memory(make_workspace, tmp_path: Path, files: dict[str, str]) -> Memory:
    vault = tmp_path / "vault"
    for rel, text in files.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    ws = make_workspace({"MEMORY.md": "# Preferences\n\nAisle seats.\n",
                         "memory/2026-11-29.md": "- met Alice about the giraffe migration\n"})
    return Memory(ws, config={"memorySearch": {"provider": "none", "extraPaths": [str(vault)]}})


def paths(mem: Memory, query: str) -> list[str]:
    return [r.path for r in mem.search(query).results]


def test_a_page_is_found_by_its_title_which_is_its_file_name(make_workspace, tmp_path: Path) -> None:
    """In Obsidian, Logseq, Foam and Dendron a page's title is its file name, which its text rarely
    repeats: "Carol", "meeting with Carol" and "[[Sourdough]]" found nothing of ``Meeting with
    Carol.md`` or Logseq's ``pages/Sourdough.md`` (nor with the local model: "No matches.").  Such a
    page's first chunk is a candidate as good as the best keyword match, whatever its name's form
    (Dendron's dots, Logseq's namespaces, Notion's page id); MEMORY.md and daily logs are named by
    no title."""
    files = {
        "Meeting with Carol.md": "- discussed the budget cuts\n- lunch at noon\n",
        "pages/Sourdough.md": "- feed the starter every 12 hours\n- use rye flour\n",
        "pages/Infra___K8s.md": "- helm charts live in the ops repo\n",
        "proj.memdir.design.md": "---\nid: x1\ntitle: Design\n---\n\nWe settled on append-only logs.\n",
        "Trip Planning 0123456789abcdef0123456789abcdef.md": "Book the ferry. Pack light.\n",
        "Daily/2026-11-28.md": "- a meeting about the ferry\n",
        "Café Rituals.md": "- two shots, no sugar\n",
        "Daily/2026-11-23 Monday.md": "- call the plumber\n",
    }
    with vault_memory(make_workspace, tmp_path, files) as mem:
        mem.sync()
        assert paths(mem, "Carol") == ["../vault/Meeting with Carol.md"]
        assert "../vault/Meeting with Carol.md" in paths(mem, "meeting with Carol")
        assert paths(mem, "[[Sourdough]]") == paths(mem, "what do I know about sourdough?") == [
            "../vault/pages/Sourdough.md"]
        assert paths(mem, "k8s") == ["../vault/pages/Infra___K8s.md"]
        assert paths(mem, "memdir design") == ["../vault/proj.memdir.design.md"]
        assert paths(mem, "trip planning") == ["../vault/Trip Planning 0123456789abcdef0123456789abcdef.md"]
        assert paths(mem, "cafe ritual") == ["../vault/Café Rituals.md"]
        hit = mem.search("Carol", explain=True).results[0]
        assert (hit.start_line, hit.snippet.splitlines()[0]) == (1, "- discussed the budget cuts")
        assert hit.explain["matched"] == ["name"]
        assert paths(mem, "memory") == paths(mem, "29") == paths(mem, "monday") == []


def test_a_word_many_pages_are_named_with_finds_the_notes_that_use_it(make_workspace, tmp_path: Path) -> None:
    """Thirty pages named ``Standup N.md`` say nothing about which one a question about standups
    means: none is pooled by its name, so the note whose text is about them is found first."""
    files = {f"standups/Standup {i}.md": f"- item {i}\n" for i in range(30)}
    files["Rituals.md"] = "The standup moved to ten, after the stand-up poll.\n"
    with vault_memory(make_workspace, tmp_path, files) as mem:
        mem.sync()
        assert paths(mem, "standup") == ["../vault/Rituals.md"]


def test_with_the_local_model_a_page_is_found_by_its_title_too(make_workspace, tmp_path: Path) -> None:
    """Hybrid search (the default, with the local model): "Carol" scored ``Meeting with
    Carol.md``, whose text is about a budget, under the floor and answered "No matches."; a note
    found by its name is a match strong enough to be returned in a spare slot."""
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Meeting with Carol.md").write_text("- discussed the budget cuts\n- lunch at noon\n")
    (vault / "Sourdough.md").write_text("- feed the starter every 12 hours\n- use rye flour\n")
    ws = make_workspace({"memory/2026-11-29.md": "- met Alice about the giraffe migration\n"})
    with Memory(ws, config={"memorySearch": {"provider": "local", "extraPaths": [str(vault)]}}) as mem:
        mem.sync()
        response = mem.search("Carol")
        assert response.mode == "hybrid"
        assert response.results[0].path == "../vault/Meeting with Carol.md"


def test_a_vault_linked_in_as_extra_path_is_named_with_where_it_points(make_workspace, tmp_path: Path,
                                                                        run_cli) -> None:
    """``extraPaths = ["~/Obsidian"]`` where ``~/Obsidian`` links to the synced drive's vault: the
    link is not followed (as in OpenClaw), but a search answered "No matches." with a note that
    memdir indexes "what memorySearch.extraPaths lists", which it did list, and the index's warning
    told only to "list what it points to instead".  Both name the skipped link and its target."""
    vault = tmp_path / "drive" / "Vault"
    vault.mkdir(parents=True)
    (vault / "Trip.md").write_text("The ferry leaves at nine.\n")
    (tmp_path / "Obsidian").symlink_to(vault)
    ws = make_workspace({"memdir.toml": '[memorySearch]\nprovider = "none"\nextraPaths = ["../Obsidian"]\n'})
    told = f"../Obsidian: a symlink in extraPaths (not followed: list {vault} instead)"
    searched = run_cli("-w", str(ws), "search", "ferry")
    assert searched.returncode == 0 and searched.stdout.strip() == "No matches."
    assert told in searched.stderr
    assert told in run_cli("-w", str(ws), "index").stderr


def test_the_templates_an_obsidian_vault_names_in_its_settings_are_not_notes(make_workspace, tmp_path: Path) -> None:
    """An Obsidian vault names its template folder in ``.obsidian/templates.json`` (the core
    Templates plugin) or Templater's settings: its daily template (``## Gratitude``, ``{{date}}``)
    answered "gratitude" above every daily note written from it.  Those folders are not walked; a
    folder of that name in another vault, or one extraPaths lists itself, is."""
    template = "# {{date}}\n\n## Gratitude\n- \n\n## What I learned\n- \n"
    files = {
        ".obsidian/templates.json": '{"folder": "Meta/Templates/"}',
        ".obsidian/plugins/templater-obsidian/data.json": '{"templates_folder": "Templater", "x": 1}',
        "Meta/Templates/Daily.md": template,
        "Templater/Weekly.md": "# <% tp.date.now() %>\n\n## Gratitude review\n",
        "Daily/2026-11-28.md": "## Gratitude\n- the ferry crew found my scarf\n",
        "other vault/Meta/Templates/kept.md": "Gratitude letters to write.\n",
    }
    with vault_memory(make_workspace, tmp_path, files) as mem:
        mem.sync()
        assert sorted(paths(mem, "gratitude")) == ["../vault/Daily/2026-11-28.md",
                                                   "../vault/other vault/Meta/Templates/kept.md"]
    listed = {"memorySearch": {"provider": "none", "extraPaths": [str(tmp_path / "vault"),
                                                                  str(tmp_path / "vault" / "Templater")]}}
    with Memory(tmp_path / "ws", config=listed) as mem:
        assert "../vault/Templater/Weekly.md" in paths(mem, "gratitude review")


def test_an_image_or_a_zeroed_file_under_a_note_name_is_no_text(make_workspace, tmp_path: Path) -> None:
    """A PNG or PDF saved under a ``.md`` name (an attachment renamed, a sync tool's mix-up) was
    indexed as text: 11 chunks of noise from 3 KB of PNG, embedded and cited.  It is named among
    the skipped files, not indexed.  A note a crash left as NUL bytes is named too, and what the
    index held of it (its last text, nowhere else now) is kept.  A note that merely starts with
    ``%PDF-`` is text."""
    png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(256)) * 12
    pdf = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Length 5 >> stream\n\x00\x01\x02\nendstream\n"
    files = {"attachments/diagram.md": "", "attachments/spec.md": "", "Ferry.md": "The zebra ferry leaves at nine.\n",
             "PDF notes.md": "%PDF-1.7 is the version our invoices use.\n"}
    with vault_memory(make_workspace, tmp_path, files) as mem:
        vault = tmp_path / "vault"
        (vault / "attachments" / "diagram.md").write_bytes(png)
        (vault / "attachments" / "spec.md").write_bytes(pdf)
        report = mem.sync()
        assert report.indexed == 4  # the two notes of the vault, MEMORY.md and the daily log
        chunks = mem.store.conn.execute("SELECT path FROM chunks WHERE path LIKE '%attachments%'").fetchall()
        assert chunks == []
        assert paths(mem, "invoices version") == ["../vault/PDF notes.md"]
        (vault / "Ferry.md").write_bytes(b"\x00" * 4096)  # a power cut while it was being written
        mem.sync()
        assert paths(mem, "zebra ferry") == ["../vault/Ferry.md"]
        why = {s["path"]: s["error"] for s in mem.status()["skipped"]}
        assert why["../vault/attachments/diagram.md"].startswith("a PNG image, not text")
        assert why["../vault/attachments/spec.md"].startswith("a PDF document, not text")
        assert why["../vault/Ferry.md"].startswith("holds nothing but NUL bytes")
