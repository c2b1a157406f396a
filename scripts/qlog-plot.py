#!/usr/bin/env python3
"""Summarise agentwire qlog traces (JSON-SEQ, `--qlog DIR`) and draw a recovery episode as SVG.

    scripts/qlog-plot.py summary TRACE...
    scripts/qlog-plot.py plot TRACE OUT.svg [--from MS] [--to MS] [--title TEXT]

`summary` prints, per trace: packets sent, received and declared lost; the loss share; the
median congestion window and bytes in flight; the share of window updates at which the
sender was window-limited (in flight within one packet of the window); and the median
smoothed RTT.

`plot` draws the congestion window and bytes in flight (top), and smoothed and latest RTT
(bottom) over time, with a red tick for every packet declared lost. No dependencies beyond
the Python standard library, so anyone can redraw the README's pictures from the committed
traces.
"""
import json
import statistics
import sys
from pathlib import Path


def records(path):
    text = Path(path).read_text()
    for chunk in text.split("\x1e"):
        chunk = chunk.strip()
        if chunk:
            yield json.loads(chunk)


def events(path):
    """(time_ms, name, data) for every event of a trace, in order."""
    out = []
    for r in records(path):
        if "name" in r and "time" in r:
            out.append((float(r["time"]), r["name"], r.get("data", {})))
    return out


RTT_FIELDS = ("min_rtt", "smoothed_rtt", "latest_rtt", "rtt_variance")


def series(evs):
    """Recovery metrics as step series: each field keeps its last value until updated.

    quinn 0.11 writes the RTT fields in seconds (qlog says milliseconds): they are scaled to
    milliseconds here when the trace says it was written by quinn's seconds convention (every
    RTT below 30, i.e. under 30 s if seconds)."""
    cur = {}
    rows = []
    lost = []
    for t, name, data in evs:
        if name == "recovery:metrics_updated":
            cur.update({k: v for k, v in data.items() if v is not None})
            rows.append((t, dict(cur)))
        elif name == "recovery:packet_lost":
            lost.append(t)
    rtts = [r[k] for _, r in rows for k in RTT_FIELDS if k in r]
    if rtts and max(rtts) < 30:
        for _, r in rows:
            for k in RTT_FIELDS:
                if k in r:
                    r[k] = r[k] * 1000.0
    return rows, lost


def summary(paths):
    print(
        f"{'trace':<60} {'sent':>7} {'recv':>7} {'lost':>5} {'loss%':>6} "
        f"{'cwnd_p50':>9} {'infl_p50':>9} {'cwnd_lim%':>9} {'srtt_p50':>9}"
    )
    for p in paths:
        evs = events(p)
        sent = sum(1 for _, n, _ in evs if n == "transport:packet_sent")
        recv = sum(1 for _, n, _ in evs if n == "transport:packet_received")
        rows, lost = series(evs)
        cwnd = [r["congestion_window"] for _, r in rows if "congestion_window" in r]
        infl = [r["bytes_in_flight"] for _, r in rows if "bytes_in_flight" in r]
        limited = [
            r["bytes_in_flight"] + 1500 >= r["congestion_window"]
            for _, r in rows
            if "bytes_in_flight" in r and "congestion_window" in r
        ]
        srtt = [r["smoothed_rtt"] for _, r in rows if "smoothed_rtt" in r]
        med = lambda xs: statistics.median(xs) if xs else float("nan")
        share = 100.0 * sum(limited) / len(limited) if limited else float("nan")
        loss = 100.0 * len(lost) / sent if sent else float("nan")
        print(
            f"{str(p)[-60:]:<60} {sent:>7} {recv:>7} {len(lost):>5} {loss:>6.2f} "
            f"{med(cwnd):>9.0f} {med(infl):>9.0f} {share:>9.1f} {med(srtt):>9.1f}"
        )


def polyline(points, colour, width=1.5):
    if not points:
        return ""
    d = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="{width}" points="{d}"/>\n'


def steps(pairs):
    """A step line through (x, y) pairs."""
    out = []
    for i, (x, y) in enumerate(pairs):
        if i:
            out.append((x, out[-1][1]))
        out.append((x, y))
    return out


def panel(x0, y0, w, h, t0, t1, lines, lost, ylabel, unit_div, unit):
    """One chart: lines = [(label, colour, [(t, value)])]."""
    vmax = max((v for _, _, pts in lines for _, v in pts), default=1) or 1
    vmax *= 1.1
    sx = lambda t: x0 + (t - t0) / (t1 - t0) * w
    sy = lambda v: y0 + h - v / vmax * h
    svg = f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>\n'
    for i in range(5):
        v = vmax * i / 4
        y = sy(v)
        svg += f'<line x1="{x0}" x2="{x0 + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>\n'
        svg += (
            f'<text x="{x0 - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{v / unit_div:.0f}</text>\n"
        )
    svg += (
        f'<text x="{x0 - 48}" y="{y0 + h / 2}" font-size="12" '
        f'transform="rotate(-90 {x0 - 48} {y0 + h / 2})" text-anchor="middle">'
        f"{ylabel} ({unit})</text>\n"
    )
    for t in lost:
        x = sx(t)
        svg += f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y0 + 8}" stroke="#d00" stroke-width="1.5"/>\n'
    for i, (label, colour, pts) in enumerate(lines):
        svg += polyline([(sx(t), sy(v)) for t, v in steps(pts)], colour)
        lx = x0 + 10 + i * 170
        svg += f'<line x1="{lx}" x2="{lx + 20}" y1="{y0 + 20}" y2="{y0 + 20}" stroke="{colour}" stroke-width="2"/>\n'
        svg += f'<text x="{lx + 25}" y="{y0 + 24}" font-size="12">{label}</text>\n'
    return svg


def plot(path, out, t_from=None, t_to=None, title=None):
    rows, lost = series(events(path))
    if not rows:
        sys.exit(f"{path}: no recovery:metrics_updated events")
    t0 = rows[0][0] if t_from is None else t_from
    t1 = rows[-1][0] if t_to is None else t_to
    rows = [(t, r) for t, r in rows if t0 <= t <= t1]
    lost = [t for t in lost if t0 <= t <= t1]
    pick = lambda key: [(t, r[key]) for t, r in rows if key in r]
    w, h = 900, 230
    x0 = 80
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{x0 + w + 20}" height="{2 * h + 110}" '
        f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
    )
    svg += f'<text x="{x0}" y="20" font-size="14">{title or Path(path).name}</text>\n'
    svg += panel(
        x0, 35, w, h, t0, t1,
        [("congestion window", "#1f77b4", pick("congestion_window")),
         ("bytes in flight", "#ff7f0e", pick("bytes_in_flight"))],
        lost, "bytes", 1024, "KiB",
    )
    svg += panel(
        x0, 35 + h + 30, w, h, t0, t1,
        [("smoothed RTT", "#2ca02c", pick("smoothed_rtt")),
         ("latest RTT", "#9467bd", pick("latest_rtt"))],
        [], "RTT", 1, "ms",
    )
    ya = 35 + 2 * h + 30
    for i in range(6):
        t = t0 + (t1 - t0) * i / 5
        x = x0 + w * i / 5
        svg += f'<text x="{x:.1f}" y="{ya + 16}" font-size="11" text-anchor="middle">{t:.0f}</text>\n'
    svg += (
        f'<text x="{x0 + w / 2}" y="{ya + 34}" font-size="12" text-anchor="middle">'
        f"time since the connection started (ms); red ticks: packets declared lost ({len(lost)})</text>\n"
    )
    svg += "</svg>\n"
    Path(out).write_text(svg)


def main(argv):
    if len(argv) >= 2 and argv[0] == "summary":
        summary(argv[1:])
    elif len(argv) >= 3 and argv[0] == "plot":
        path, out, rest = argv[1], argv[2], argv[3:]
        opts = dict(zip(rest[::2], rest[1::2]))
        plot(
            path,
            out,
            float(opts["--from"]) if "--from" in opts else None,
            float(opts["--to"]) if "--to" in opts else None,
            opts.get("--title"),
        )
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
