#!/usr/bin/env python3
"""Splits a `perf record` profile of one `kvpack bench` run by the KV spec being decoded.

`bench` decodes its specs in rounds, one spec after the other, so a profile of the whole run
mixes them. This script cuts the samples into short time bins, gives each bin to the spec whose
own kernels (symbols named on the command line) have the most samples in it, and prints per spec
its number of samples and its hottest symbols as a share of that spec's samples. Bins without
any of the named symbols (capture, cache fills) are left out; a bin that straddles two specs
goes wholly to one of them, which is why bins should be much shorter than one spec's turn
(`-n` decode steps).

Usage:
  perf record -e cpu-clock -F 2000 -o perf.data build/release/kvpack bench -m MODEL -d 8192 \\
      -t 1 -p 16 -n 32 -r 4 --kv "f16;q4_0;f16"
  perf script -i perf.data -F time,ip,sym > samples.txt
  scripts/perf-split-by-spec.py samples.txt \\
      'f16=DotRowsBy4<3ul, unsigned short>|AxpyRowsM<3ul, unsigned short>' \\
      'q4_0=ScoreRuns<3ul, 4, 2, true>|LoadPlaneTileScales' [--bin-ms 50] [--top 14]

Each SPEC=SYMBOL|SYMBOL argument names a spec and substrings of symbols that only its decode
runs (its key and value kernels; see the profile's flat report; `|` separates them, as template
arguments hold commas). Only samples after the first one of any named symbol count.
"""
import argparse
import collections
import re
import sys

SAMPLE = re.compile(r"^\s*(\d+\.\d+):\s+[0-9a-f]+\s+(.*)$")


def parse_markers(args):
    markers = {}
    for arg in args:
        name, sep, symbols = arg.partition("=")
        if not sep or not name or not symbols:
            sys.exit(f"bad marker {arg!r}: expected SPEC=SYMBOL[|SYMBOL...]")
        markers[name] = [s for s in symbols.split("|") if s]
    return markers


def read_samples(path):
    samples = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = SAMPLE.match(line)
            if m:
                samples.append((float(m.group(1)), m.group(2).strip()))
    if not samples:
        sys.exit(f"{path}: no samples (expected `perf script -F time,ip,sym` output)")
    return samples


def owner(symbol, markers):
    for name, subs in markers.items():
        if any(s in symbol for s in subs):
            return name
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples")
    ap.add_argument("markers", nargs="+")
    ap.add_argument("--bin-ms", type=float, default=50.0)
    ap.add_argument("--top", type=int, default=14)
    a = ap.parse_args()
    markers = parse_markers(a.markers)
    samples = read_samples(a.samples)
    owned = [(t, owner(s, markers)) for t, s in samples]
    start = next((t for t, o in owned if o), None)
    if start is None:
        sys.exit("none of the named symbols occurs in the samples")
    width = a.bin_ms / 1000.0
    votes = collections.defaultdict(collections.Counter)
    for t, o in owned:
        if o and t >= start:
            votes[int((t - start) / width)][o] += 1
    per_spec = collections.defaultdict(collections.Counter)
    for t, s in samples:
        if t < start:
            continue
        v = votes.get(int((t - start) / width))
        if v:
            per_spec[v.most_common(1)[0][0]][s] += 1
    for name in markers:
        counts = per_spec.get(name, collections.Counter())
        total = sum(counts.values())
        print(f"{name}: {total} samples")
        for symbol, n in counts.most_common(a.top):
            print(f"  {100.0 * n / total:5.1f}%  {symbol[:100]}")


if __name__ == "__main__":
    main()
