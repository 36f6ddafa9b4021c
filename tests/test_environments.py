"""The environments users really run memdir in: a read-only home, odd locales and encodings,
streams that are pipes or closed, interpreter flags.  Each runs the real CLI in a subprocess with
that environment set.
"""

from __future__ import annotations

import json
import os

from unprivileged import give_away, run_cli_as_user, shared_scratch

KEYWORD = json.dumps({"memorySearch": {"provider": "none"}})


def test_a_state_folder_that_cannot_be_made_or_written_is_named_as_such():
    """With a read-only ``$HOME`` (``~/.memdir`` cannot be made) every command said "its folder …
    was removed while it was being opened (was memdir's state folder deleted?)"; with a state
    folder of another user's, only "unable to open database file".  Both now say what is wrong
    and where to point memdir instead."""
    with shared_scratch() as root:
        ws = root / "ws"
        ws.mkdir()
        (ws / "MEMORY.md").write_text("- The otter eats fish.\n")
        (root / "memdir.json").write_text(KEYWORD)
        give_away(ws)
        (root / "home").mkdir(mode=0o555)  # stays root's: read-only for the user
        (root / "theirs" / "memory").mkdir(parents=True)
        if os.geteuid() != 0:
            os.chmod(root / "home", 0o555)
            os.chmod(root / "theirs" / "memory", 0o555)
        config = ["-w", str(ws), "--config", str(root / "memdir.json")]

        home_state = root / "home" / ".memdir"
        out = run_cli_as_user(home_state, "search", "otter", *config)
        assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        assert f"cannot create {home_state}: Permission denied" in out.stderr
        assert "--state-dir" in out.stderr and "was removed" not in out.stderr

        out = run_cli_as_user(root / "theirs", "index", *config, "--json")
        assert out.returncode == 1, out.stderr
        error = json.loads(out.stdout)["error"]
        assert f"its folder {root / 'theirs' / 'memory'} is not writable" in error["message"]
        assert "--state-dir" in error["message"]


def test_a_home_that_cannot_be_written_gets_no_onnxruntime_warning():
    """Run as a user whose ``$HOME`` cannot be written (a container's bare uid), every command that
    loaded the embedded model printed onnxruntime's coloured "Failed to persist telemetry device
    ID" warning on stderr: onnxruntime writes a telemetry id under ``~/.cache`` when imported."""
    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        ws.mkdir()
        state.mkdir()
        (ws / "MEMORY.md").write_text("- The otter eats fish.\n")
        give_away(ws)
        give_away(state)
        # run_cli_as_user sets HOME to state's parent: root's folder, which the user cannot write
        out = run_cli_as_user(state, "search", "what does the otter eat?", "-w", str(ws), "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["mode"] == "hybrid"  # the embedded model ran
        assert out.stderr == ""
