"""Which files are memory (R§2) and how ``memory_get`` reads them safely (R§10.2).

Discovery never follows a symlink and never writes.  Reads through :func:`resolve_readable`
accept only memory paths and configured extra paths, reject any symlink on the way below the
allowed root, and name the real error instead of a catch-all "path required".
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One discovered file: workspace-relative path (``/`` separators), absolute path, stat."""

    path: str
    abs_path: str
    source: str
    mtime_ns: int
    size: int


@dataclass
class Discovery:
    files: list[FileEntry] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)


def rel_path(workspace: Path, abs_path: Path) -> str:
    return Path(os.path.relpath(abs_path, workspace)).as_posix()


def _walk(folder: str, rel: str, issues: list[str]) -> Iterator[tuple[str, str, os.stat_result]]:
    """``(abs, rel, stat)`` of regular ``*.md`` files under ``folder``, recursively, sorted.

    Symlinks are skipped.  Paths stay strings: on 10,000 files, building ``Path`` objects and
    calling ``relpath`` cost more than all the ``stat`` calls together.
    """
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        issues.append(f"memory directory not accessible ({folder}): {errno.errorcode.get(exc.errno or 0, exc)}")
        return
    for entry in entries:
        try:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(entry.path, f"{rel}{entry.name}/", issues)
            elif entry.is_file(follow_symlinks=False) and entry.name.endswith(".md"):
                yield entry.path, rel + entry.name, entry.stat(follow_symlinks=False)
        except OSError as exc:
            issues.append(f"{entry.path} not readable ({errno.errorcode.get(exc.errno or 0, exc)})")


def discover(workspace: Path, extra_paths: list[Path] | None = None) -> Discovery:
    """List memory files: MEMORY.md, memory.md, memory/**/*.md, then extraPaths (R§2)."""
    found = Discovery()
    candidates: list[tuple[str, str, os.stat_result]] = []
    for name in ROOT_FILES:
        p = workspace / name
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        except OSError as exc:
            found.issues.append(f"{p} not readable ({errno.errorcode.get(exc.errno or 0, exc)})")
            continue
        if stat.S_ISREG(st.st_mode):
            candidates.append((str(p), name, st))
    mem_dir = workspace / MEMORY_DIR
    try:
        st = os.lstat(mem_dir)
        if stat.S_ISDIR(st.st_mode):
            candidates.extend(_walk(str(mem_dir), MEMORY_DIR + "/", found.issues))
    except FileNotFoundError:
        pass
    for extra in extra_paths or []:
        try:
            st = os.lstat(extra)
        except FileNotFoundError:
            found.issues.append(f"additional memory path missing ({extra})")
            continue
        except OSError as exc:
            found.issues.append(f"additional memory path not accessible ({extra}): {exc.strerror}")
            continue
        if stat.S_ISLNK(st.st_mode):
            continue
        if stat.S_ISDIR(st.st_mode):
            candidates.extend(_walk(str(extra), rel_path(workspace, extra) + "/", found.issues))
        elif stat.S_ISREG(st.st_mode) and extra.name.endswith(".md"):
            candidates.append((str(extra), rel_path(workspace, extra), st))
    seen: set[tuple[int, int]] = set()
    for abs_path, rel, st in candidates:
        identity = (st.st_dev, st.st_ino)  # same file reached twice (overlapping extraPaths)
        if identity in seen:
            continue
        seen.add(identity)
        found.files.append(FileEntry(rel, abs_path, "memory", st.st_mtime_ns, st.st_size))
    if not found.files:
        found.issues.insert(0, f"no memory files found in {workspace}")
    return found


def is_memory_path(rel: str) -> bool:
    """``MEMORY.md``, ``memory.md`` or ``memory/...`` (case-sensitive).

    Unlike OpenClaw, leading dots are not stripped: ``.memory/x.md`` is not a memory path.
    """
    norm = rel.strip().replace("\\", "/")
    while norm.startswith("./"):
        norm = norm[2:]
    return norm in ROOT_FILES or (norm.startswith("memory/") and len(norm) > len("memory/"))


class PathError(ValueError):
    """A path memory_get refuses or cannot read; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    abs_path: Path
    rel: str
    root: Path


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_readable(raw: str, workspace: Path, extra_paths: list[Path]) -> ResolvedPath:
    """Check a requested path against the allowed roots without touching anything outside them."""
    text = (raw or "").strip()
    if not text:
        raise PathError("path required")
    if "\x00" in text:
        raise PathError("invalid path: contains a NUL byte")
    candidate = Path(os.path.expanduser(text.replace("\\", "/")))
    absolute = Path(os.path.normpath(candidate if candidate.is_absolute() else workspace / candidate))
    rel = rel_path(workspace, absolute)
    root: Path | None = None
    if not rel.startswith("..") and is_memory_path(rel):
        root = workspace
    else:
        for extra in extra_paths:
            if extra.suffix == ".md" and absolute == extra:
                root = extra.parent
                break
            if extra.suffix != ".md" and _within(absolute, extra):
                root = extra
                break
    if root is None:
        raise PathError(
            f"path not allowed: {text} (memory_get reads MEMORY.md, memory.md, memory/**/*.md "
            "and configured extraPaths only)"
        )
    if absolute.suffix != ".md":
        raise PathError(f"not a Markdown file: {text} (only .md files are memory)")
    # No symlink anywhere from the allowed root down to the file (fixes PRs #68597/#80331).
    probe = root
    for part in absolute.relative_to(root).parts if absolute != root else ():
        probe = probe / part
        try:
            st = os.lstat(probe)
        except FileNotFoundError:
            break  # missing: reported as empty text by the reader
        except OSError as exc:
            raise PathError(f"cannot access {rel_path(workspace, probe)}: {exc.strerror}") from exc
        if stat.S_ISLNK(st.st_mode):
            raise PathError(f"symlinks are not followed: {rel_path(workspace, probe)}")
    if root != workspace and root in extra_paths:
        try:
            if stat.S_ISLNK(os.lstat(root).st_mode):
                raise PathError(f"symlinks are not followed: {root}")
        except FileNotFoundError:
            pass
    return ResolvedPath(absolute, rel, root)


def read_lines(resolved: ResolvedPath, from_line: int | None = None, lines: int | None = None) -> str:
    """File text, or a 1-based slice of it; a missing file reads as ``""`` (R§10.2)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(resolved.abs_path, flags)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathError(f"symlinks are not followed: {resolved.rel}") from exc
        if exc.errno == errno.EISDIR:
            raise PathError(f"not a file: {resolved.rel}") from exc
        raise PathError(f"cannot read {resolved.rel}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PathError(f"not a file: {resolved.rel}")
    with os.fdopen(fd, "rb") as fh:
        text = fh.read().decode("utf-8", errors="replace")
    if not from_line and not lines:
        return text
    all_lines = text.split("\n")
    start = max(1, int(from_line or 1))
    count = max(1, int(lines if lines else len(all_lines)))
    return "\n".join(all_lines[start - 1 : start - 1 + count])
