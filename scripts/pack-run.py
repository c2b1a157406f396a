#!/usr/bin/env python3
"""Packs one committed benchmark run into the form docs/benchmarks keeps (issue 41). Standard
library only:

    python3 scripts/pack-run.py docs/benchmarks/NAME [...]

A run directory keeps, as plain files, what a reader opens: every Markdown file that is not a
per-round report (README.md, summary.md, report.md at the top, ...), the commands, commit and
machine (command*.txt, commit*.txt, machine*.txt), the scripts and configurations that ran it
(*.sh, *.py, *.patch, *.conf, Caddyfile), pictures (*.png) and CSV tables. Everything else, the
raw data (JSON and JSONL, per-round report.md files, ping and run logs, profiles), goes into one
archive, `data.tar.xz`, beside them, under the same relative paths. Gzipped files (*.gz) are
stored decompressed in the archive, under their name without .gz, so xz sees the text: xz over
a whole run is about half the size of gzip per file, because the rounds of a run repeat each
other.

A per-round report is a report.md below the top of the run beside at least one JSON file: the
rendering of that JSON by `agentwire bench`, one per round.

The archive is reproducible: members sorted by path, mtime 0, owner root, mode 0644. Running
the script again on a packed run adds what is new to the archive (the old members are kept,
a new one with the same path replaces it; a member these rules now keep plain comes out of
the archive as a plain file) and leaves the rest alone. Extract with
`tar -xJf data.tar.xz` (or Python's tarfile).

Prints, per run, its size before and after. Exits 1 when a path is not a directory.
"""

import gzip
import io
import lzma
import os
import sys
import tarfile

ARCHIVE = "data.tar.xz"
KEEP_SUFFIXES = (".md", ".sh", ".py", ".patch", ".conf", ".png", ".csv")
# Text a reader opens, by name: the terminal of a run, criterion's output, the tables scripts
# print.
KEEP_NAMES = ("Caddyfile", "terminal.txt", "bench.txt", "matrix.txt", "summary.txt", "medians.txt")
KEEP_PREFIXES = ("command", "commit", "machine")


def is_kept_plain(rel, names_in_dir):
    """Whether the file at rel (relative to the run) stays a plain file."""
    base = os.path.basename(rel)
    if base == ARCHIVE:
        return True
    if base == "report.md" and os.path.dirname(rel):
        # A per-round report sits beside the JSON it renders.
        if any(n.endswith((".json", ".json.gz")) for n in names_in_dir):
            return False
    if base.endswith(KEEP_SUFFIXES) or base in KEEP_NAMES:
        return True
    return base.endswith(".txt") and base.startswith(KEEP_PREFIXES)


def read_member(path):
    """(name suffix to drop, bytes) of a file going into the archive."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        return ".gz", gzip.decompress(data)
    return "", data


def dir_size(root):
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            total += os.path.getsize(os.path.join(dirpath, name))
    return total


def pack(run):
    before = dir_size(run)
    members = {}
    archive = os.path.join(run, ARCHIVE)
    changed = False
    if os.path.exists(archive):
        with tarfile.open(archive, "r:xz") as old:
            infos = [i for i in old.getmembers() if i.isfile()]
            names = {}
            for info in infos:
                names.setdefault(os.path.dirname(info.name), []).append(os.path.basename(info.name))
            for info in infos:
                name = os.path.normpath(info.name)
                if name.startswith("..") or os.path.isabs(name):
                    raise SystemExit(f"pack-run: {archive} has a member outside the run: {info.name}")
                data = old.extractfile(info).read()
                if is_kept_plain(name, names[os.path.dirname(info.name)]):
                    path = os.path.join(run, name)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "wb") as f:
                        f.write(data)
                    changed = True
                else:
                    members[name] = data

    moved = []
    for dirpath, dirs, files in os.walk(run):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, run)
            if is_kept_plain(rel, files):
                continue
            drop, data = read_member(path)
            members[rel[: len(rel) - len(drop)] if drop else rel] = data
            moved.append(path)

    if not moved and not changed:
        print(f"{run}: nothing to pack ({before / 1e6:.2f} MB)")
        return

    tmp = archive + ".tmp"
    with open(tmp, "wb") as raw:
        with lzma.LZMAFile(raw, "wb", preset=9 | lzma.PRESET_EXTREME) as xz:
            with tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for name in sorted(members):
                    data = members[name]
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    info.mtime = 0
                    info.mode = 0o644
                    info.uid = info.gid = 0
                    info.uname = info.gname = "root"
                    tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, archive)

    for path in moved:
        os.remove(path)
    for dirpath, _, _ in sorted(os.walk(run), key=lambda w: -len(w[0])):
        if dirpath != run and not os.listdir(dirpath):
            os.rmdir(dirpath)
    after = dir_size(run)
    print(f"{run}: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB ({len(moved)} files into {ARCHIVE})")


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    status = 0
    for run in argv[1:]:
        if not os.path.isdir(run):
            print(f"pack-run: {run} is not a directory", file=sys.stderr)
            status = 1
            continue
        pack(os.path.normpath(run))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
