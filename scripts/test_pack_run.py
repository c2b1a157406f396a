#!/usr/bin/env python3
"""Tests of scripts/pack-run.py (standard library only): python3 scripts/test_pack_run.py"""

import gzip
import importlib.util
import io
import os
import tarfile
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("pack_run", os.path.join(HERE, "pack-run.py"))
pack_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pack_run)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def members(archive):
    with tarfile.open(archive, "r:xz") as tar:
        return {i.name: tar.extractfile(i).read() for i in tar.getmembers() if i.isfile()}


def files(root):
    out = set()
    for dirpath, _, names in os.walk(root):
        for n in names:
            out.add(os.path.relpath(os.path.join(dirpath, n), root))
    return out


class PackRun(unittest.TestCase):
    def make_run(self, root):
        write(f"{root}/README.md", b"# a run\n")
        write(f"{root}/report.md", b"top report\n")
        write(f"{root}/command.txt", b"agentwire bench\n")
        write(f"{root}/machine.txt", b"2 CPUs\n")
        write(f"{root}/terminal.txt", b"QUIC wins\n")
        write(f"{root}/bench-1.json", b'{"cells": []}')
        write(f"{root}/big.json.gz", gzip.compress(b'{"big": true}'))
        write(f"{root}/r1/bench-2.json", b'{"round": 1}')
        write(f"{root}/r1/report.md", b"round 1\n")
        write(f"{root}/r1/ping.txt", b"64 bytes\n")
        write(f"{root}/notes/summary.md", b"kept: no JSON beside it\n")

    def pack(self, run):
        with redirect_stdout(io.StringIO()):
            pack_run.pack(run)

    def test_raw_data_goes_into_one_archive_and_the_readable_files_stay(self):
        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "run")
            self.make_run(run)
            self.pack(run)
            self.assertEqual(
                files(run),
                {"README.md", "report.md", "command.txt", "machine.txt", "terminal.txt",
                 "notes/summary.md", "data.tar.xz"},
            )
            m = members(os.path.join(run, "data.tar.xz"))
            self.assertEqual(
                m,
                {
                    "bench-1.json": b'{"cells": []}',
                    "big.json": b'{"big": true}',  # stored decompressed, without .gz
                    "r1/bench-2.json": b'{"round": 1}',
                    "r1/report.md": b"round 1\n",
                    "r1/ping.txt": b"64 bytes\n",
                },
            )

    def test_the_archive_is_reproducible(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a"), os.path.join(d, "b")
            self.make_run(a)
            self.make_run(b)
            os.utime(os.path.join(b, "bench-1.json"), (1, 1))
            self.pack(a)
            self.pack(b)
            with open(os.path.join(a, "data.tar.xz"), "rb") as fa, open(os.path.join(b, "data.tar.xz"), "rb") as fb:
                self.assertEqual(fa.read(), fb.read())

    def test_packing_again_adds_new_files_and_keeps_the_old(self):
        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "run")
            self.make_run(run)
            self.pack(run)
            write(f"{run}/r2/bench-3.json", b'{"round": 2}')
            write(f"{run}/r1/ping.txt", b"replaced\n")
            self.pack(run)
            m = members(os.path.join(run, "data.tar.xz"))
            self.assertEqual(m["r2/bench-3.json"], b'{"round": 2}')
            self.assertEqual(m["r1/ping.txt"], b"replaced\n")
            self.assertEqual(m["bench-1.json"], b'{"cells": []}')
            self.assertFalse(os.path.exists(os.path.join(run, "r2")), "emptied directories are removed")

    def test_a_member_now_kept_plain_comes_out_of_the_archive(self):
        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "run")
            self.make_run(run)
            old = pack_run.KEEP_NAMES
            pack_run.KEEP_NAMES = tuple(n for n in old if n != "terminal.txt")
            try:
                self.pack(run)
            finally:
                pack_run.KEEP_NAMES = old
            self.assertIn("terminal.txt", members(os.path.join(run, "data.tar.xz")))
            self.pack(run)
            self.assertNotIn("terminal.txt", members(os.path.join(run, "data.tar.xz")))
            with open(os.path.join(run, "terminal.txt"), "rb") as f:
                self.assertEqual(f.read(), b"QUIC wins\n")

    def test_a_member_outside_the_run_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "run")
            os.makedirs(run)
            with tarfile.open(os.path.join(run, "data.tar.xz"), "w:xz") as tar:
                info = tarfile.TarInfo("../escape.txt")
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
            with self.assertRaises(SystemExit):
                self.pack(run)
            self.assertFalse(os.path.exists(os.path.join(d, "escape.txt")))


if __name__ == "__main__":
    unittest.main()
