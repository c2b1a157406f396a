#!/usr/bin/env python3
"""Writes a benchmark run's env.json: the command, the git sha (and whether files outside the
run's own output directory had uncommitted changes), the machine, tool versions and the shape.

usage: bench_env.py OUT_DIR COMMAND SHAPE_JSON [NAME=VERSION_COMMAND ...]
  e.g. bench_env.py out "scripts/x.sh out" '{"agents": 10}' rustc="rustc --version"
Used by scripts/sdk-bench.sh and scripts/cluster-bench.sh."""

import json
import os
import platform
import shlex
import subprocess
import sys


def out(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except Exception as e:  # a missing tool is recorded, not fatal
        return f"unavailable: {e}"


def main(argv):
    if len(argv) < 4:
        raise SystemExit(__doc__)
    out_dir, command, shape = argv[1], argv[2], json.loads(argv[3])
    model = next(
        (l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
        "?",
    )
    env = {
        "command": command,
        "git_sha": out("git", "rev-parse", "HEAD"),
        "git_dirty": bool(
            out("git", "status", "--porcelain", "--untracked-files=no", "--", ".", f":!{out_dir}")
        ),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
    }
    for item in argv[4:]:
        name, _, cmd = item.partition("=")
        env[name] = out(*shlex.split(cmd))
    env["shape"] = shape
    with open(os.path.join(out_dir, "env.json"), "w") as f:
        json.dump(env, f, indent=2)


if __name__ == "__main__":
    main(sys.argv)
