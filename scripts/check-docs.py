#!/usr/bin/env python3
"""Checks the documentation (issue 41); standard library only. Run from anywhere:

    python3 scripts/check-docs.py

(a) docs/benchmarks, as tracked by git (the working-tree sizes of the files `git ls-files`
    lists there), is no larger than DOCS_BENCHMARKS_LIMIT_BYTES;
(b) every relative link in README.md, docs/book/**/*.md, docs/protocol.md,
    docs/benchmarks/BENCHMARKS.md and docs/benchmarks/notes/*.md resolves to an existing file
    or directory that git does not ignore: [text](path), ![alt](path), [label]: path
    definitions, <a href="path"> and <img src="path">; URLs with a scheme (http:, https:,
    mailto:, ...) and pure #anchors are skipped, #anchors are stripped, and links inside code
    spans, fenced code blocks and HTML comments are not links;
(c) if docs/book/SUMMARY.md exists, every chapter it lists is an existing file.

Prints what it checked; exits 1 with the list of problems, 0 when there are none.
"""

import glob
import os
import re
import subprocess
import sys
import urllib.parse

# The limit is issue 41's goal: 20 MB for docs/benchmarks. Each run keeps its raw data in one
# data.tar.xz (scripts/pack-run.py); experiments not kept are decision notes in
# docs/benchmarks/notes/. Never raise it.
DOCS_BENCHMARKS_LIMIT_BYTES = 20 * 1000 * 1000
DOCS_BENCHMARKS_GOAL_BYTES = 20 * 1000 * 1000

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1000 * 1000


def rel(path):
    return os.path.relpath(path, ROOT)


def git(*args, stdin=None):
    """Runs git in ROOT; returns stdout as bytes, or None when git or the checkout is missing."""
    try:
        r = subprocess.run(["git", "-C", ROOT, *args], input=stdin, capture_output=True)
    except OSError:
        return None
    return r.stdout if r.returncode in (0, 1) else None


# ---------------------------------------------------------------- (a) size of docs/benchmarks


def benchmarks_size():
    """(bytes, files, how) of docs/benchmarks: the tracked files' working-tree sizes."""
    out = git("ls-files", "-z", "--", "docs/benchmarks")
    if out is not None:
        paths = [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
        how = "tracked by git, working-tree sizes"
    else:
        paths = []
        for d, _, files in os.walk(os.path.join(ROOT, "docs", "benchmarks")):
            paths += [rel(os.path.join(d, f)) for f in files]
        how = "every file (not a git checkout)"
    total = 0
    for p in paths:
        try:
            total += os.lstat(os.path.join(ROOT, p)).st_size
        except FileNotFoundError:
            pass  # deleted in the working tree, not yet committed
    return total, len(paths), how


# ---------------------------------------------------------------- (b) links

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:.+?)(?<!`)\1(?!`)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ATTR = re.compile(r"<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def strip_code(text):
    """The text with fenced code blocks, code spans and HTML comments blanked out (line
    numbers kept)."""
    text = HTML_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out = []
    fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                out.append("")
                continue
            out.append(CODE_SPAN.sub("", line))
        else:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip().strip(fence[0]):
                fence = None
            out.append("")
    return out


def inline_destinations(line):
    """Destinations of inline links and images on one line: the part after each `](`."""
    i = 0
    while True:
        i = line.find("](", i)
        if i < 0:
            return
        j = i + 2
        while j < len(line) and line[j] in " \t":
            j += 1
        if j < len(line) and line[j] == "<":
            k = line.find(">", j)
            if k > 0:
                yield line[j + 1:k]
            i = j
            continue
        depth, k = 0, j
        while k < len(line):
            c = line[k]
            if c == "\\":
                k += 2
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif c in " \t":
                break
            k += 1
        if k < len(line):  # closed by ")" or followed by a title
            yield line[j:k]
        i = k


def links(path):
    """(line number, destination) of every link in a Markdown file, outside code."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = strip_code(f.read())
    for n, line in enumerate(lines, 1):
        m = REF_DEF.match(line)
        if m:
            yield n, m.group(1).strip("<>")
            continue
        for dest in inline_destinations(line):
            yield n, dest
        for m in HTML_ATTR.finditer(line):
            yield n, m.group(1) if m.group(1) is not None else m.group(2)


def target_of(md_path, dest):
    """The local path a link points at, or None for URLs, anchors and empty links."""
    dest = dest.strip()
    if not dest or dest.startswith("#") or SCHEME.match(dest):
        return None
    dest = urllib.parse.unquote(dest.split("#", 1)[0].split("?", 1)[0])
    if not dest:
        return None
    if dest.startswith("/"):
        return os.path.normpath(os.path.join(ROOT, dest.lstrip("/")))
    return os.path.normpath(os.path.join(os.path.dirname(md_path), dest))


def ignored_by_git(paths):
    """The subset of paths that git ignores (they would not exist in a clone)."""
    if not paths:
        return set()
    out = git("check-ignore", "--stdin", "-z",
              stdin="\0".join(rel(p) for p in paths).encode())
    if not out:
        return set()
    return {os.path.normpath(os.path.join(ROOT, p)) for p in out.decode().split("\0") if p}


def check_links(files, problems):
    checked = 0
    existing = []  # (file, line, dest, target)
    for md in files:
        for n, dest in links(md):
            target = target_of(md, dest)
            if target is None:
                continue
            checked += 1
            if not os.path.exists(target):
                problems.append(f"{rel(md)}:{n}: dead link {dest!r} ({rel(target)} does not exist)")
            else:
                existing.append((md, n, dest, target))
    ignored = ignored_by_git(sorted({t for *_, t in existing}))
    for md, n, dest, target in existing:
        if target in ignored:
            problems.append(f"{rel(md)}:{n}: link {dest!r} points into a path git ignores "
                            f"({rel(target)}): dead in a clone")
    return checked


# ---------------------------------------------------------------- (c) the book's chapters


def check_summary(summary, problems):
    chapters = 0
    with open(summary, encoding="utf-8", errors="replace") as f:
        lines = strip_code(f.read())
    for n, line in enumerate(lines, 1):
        for dest in inline_destinations(line):
            if SCHEME.match(dest.strip()):
                continue
            chapters += 1
            if not dest.strip():
                problems.append(f"{rel(summary)}:{n}: chapter with no file (a draft chapter)")
                continue
            target = target_of(summary, dest)
            if target is None:
                continue
            if not os.path.isfile(target):
                problems.append(f"{rel(summary)}:{n}: chapter {dest!r} does not exist "
                                f"({rel(target)})")
    return chapters


def main():
    problems = []

    size, nfiles, how = benchmarks_size()
    print(f"docs/benchmarks: {size / MB:.1f} MB in {nfiles} files ({how}); "
          f"limit {DOCS_BENCHMARKS_LIMIT_BYTES / MB:.0f} MB, goal {DOCS_BENCHMARKS_GOAL_BYTES / MB:.0f} MB")
    if size > DOCS_BENCHMARKS_LIMIT_BYTES:
        problems.append(f"docs/benchmarks is {size} bytes ({size / MB:.1f} MB), over the limit of "
                        f"{DOCS_BENCHMARKS_LIMIT_BYTES} bytes: keep only a run's JSON (gzipped when "
                        f"large), report.md, command, commit and machine (scripts/promote-run.sh)")

    summary = os.path.join(ROOT, "docs", "book", "SUMMARY.md")
    has_summary = os.path.isfile(summary)
    files = [os.path.join(ROOT, "README.md")]
    if not os.path.isfile(files[0]):
        problems.append("README.md does not exist")
        files = []
    files += sorted(p for p in glob.glob(os.path.join(ROOT, "docs", "book", "**", "*.md"), recursive=True)
                    if not (has_summary and p == summary))  # its links are checked as chapters
    for p in ["docs/protocol.md", "docs/benchmarks/BENCHMARKS.md"]:
        if os.path.isfile(os.path.join(ROOT, p)):
            files.append(os.path.join(ROOT, p))
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "benchmarks", "notes", "*.md")))
    nlinks = check_links(files, problems)
    print(f"links: {nlinks} relative links in {len(files)} files "
          f"({', '.join(rel(f) for f in files) or 'none'})")

    if has_summary:
        print(f"book: {check_summary(summary, problems)} chapters listed in docs/book/SUMMARY.md")
    else:
        print("book: no docs/book/SUMMARY.md")

    if problems:
        print(f"\n{len(problems)} problem(s):")
        for p in problems:
            print(f"  {p}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
