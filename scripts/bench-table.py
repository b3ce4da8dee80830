#!/usr/bin/env python3
"""Summarises several runs of `kvpack bench` as the README's codec tables.

Usage: scripts/bench-table.py [--per-run[=GOAL]] RUN1.txt RUN2.txt ...   (each the output of
one `kvpack bench` with `f16` first and last in its --kv list, as the README's command has it).

Per thread count, one Markdown table: per spec, its bits per value at the deepest depth, and per
depth the median and range over the runs of its decode speed against the mean of that run's
first and last `f16` figures (the bench's own column compares with the first only); the last
column lists each run's tok/s at the deepest depth. Reads only the bench's speed table (a
`--breakdown` run's second table is left out); refuses files without it. The specs are the
first run's that every run has (the others are named and left out); every run must have the
first run's thread counts and depths.

--per-run[=GOAL]: per thread count, a second table with every run's ratio per spec and depth
(in the order of the files given), their median and mean, and how many are at or above GOAL
(default 1.00, the goal at depth 512; issue #3 asks 1.2 and 1.5 at 8192), and the 95%
confidence interval of their mean (Student's t, the runs taken as independent samples): the
figures a goal at the edge of a host's noise has to be judged by. A goal below the interval
is met beyond the host's run-to-run spread, one above it missed, one inside it undecided by
these runs.
"""
import math
import statistics
import sys


def t_two_sided_probability(t, df):
    """P(|T| <= t) for Student's t with df degrees of freedom (an integer >= 1).

    The closed forms for integer df of Abramowitz and Stegun, Handbook of Mathematical
    Functions, 26.7.3 (odd df) and 26.7.4 (even df), with theta = atan(t / sqrt(df)).
    """
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 0:  # sin(theta) (1 + c^2 / 2 + 1*3 c^4 / (2*4) + ... up to c^(df-2))
        term, total = 1.0, 1.0
        for k in range(2, df, 2):
            term *= (k - 1) / k * c * c
            total += term
        return s * total
    # (2 / pi) (theta + sin(theta) (c + 2 c^3 / 3 + 2*4 c^5 / (3*5) + ... up to c^(df-2)))
    if df == 1:
        return 2 * theta / math.pi
    term, total = c, c
    for k in range(3, df - 1, 2):
        term *= (k - 1) / k * c * c
        total += term
    return 2 / math.pi * (theta + s * total)


def t_quantile_95(df):
    """The t with P(|T| <= t) = 0.95 for df degrees of freedom (12.706 for 1, 2.262 for 9)."""
    lo, hi = 0.0, 1000.0
    for _ in range(100):  # bisection: P(|T| <= t) rises with t
        mid = (lo + hi) / 2
        if t_two_sided_probability(mid, df) < 0.95:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_interval(vals):
    """(low, high) of the 95% confidence interval of vals' mean; None for fewer than 2."""
    if len(vals) < 2:
        return None
    half = t_quantile_95(len(vals) - 1) * statistics.stdev(vals) / math.sqrt(len(vals))
    m = statistics.mean(vals)
    return m - half, m + half


def parse(path):
    """[(kv, threads, depth, bits, tok/s)] in the file's order."""
    rows = []
    in_speed_table = False  # `--breakdown` prints a second table with the same first columns
    with open(path, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == "kv":
                in_speed_table = len(cells) > 6 and cells[6] == "decode tok/s"
                continue
            if (not in_speed_table or len(cells) < 8 or cells[0] == "" or
                    cells[0].startswith("---")):
                continue
            try:
                rows.append((cells[0], int(cells[1]), int(cells[2]), float(cells[3]),
                             float(cells[6])))
            except ValueError:
                continue
    if not rows:
        sys.exit(f"{path}: no `kvpack bench` table found")
    return rows


def ratios(rows):
    """{(threads, depth): {kv: ratio}}, {(threads, depth): (first f16, last f16)}, bits."""
    out, base, bits = {}, {}, {}
    groups = {}
    for kv, t, d, b, tps in rows:
        groups.setdefault((t, d), []).append((kv, tps))
        bits[(kv, t, d)] = b
    for key, items in groups.items():
        f16 = [tps for kv, tps in items if kv == "f16"]
        if len(f16) < 2:
            sys.exit(f"threads {key[0]} depth {key[1]}: f16 must come first and last")
        mean = (f16[0] + f16[-1]) / 2
        base[key] = (f16[0], f16[-1])
        out[key] = {kv: tps / mean for kv, tps in items if kv != "f16"}
        out[key]["_tps"] = {kv: tps for kv, tps in items if kv != "f16"}
    return out, base, bits


def print_per_run(runs, t, depths, specs, goal):
    """Every run's ratio per spec and depth with t threads, their median, mean, count >= goal,
    and the 95% confidence interval of the mean."""
    print(f"\n{t} thread(s), ratio run by run:\n")
    print(f"| kv | depth | per run | median | mean | at or above {goal:.2f}x |"
          " mean's 95% interval |")
    print("|---" * 7 + "|")
    for kv in specs:
        for d in depths:
            vals = [r[0][(t, d)][kv] for r in runs]
            # Counted on the rounded figures, as printed.
            at_goal = sum(1 for v in vals if round(v, 3) >= goal)
            ci = mean_interval(vals)
            ci_text = f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else "(one run)"
            print(f"| `{kv}` | {d} | " + ", ".join(f"{v:.3f}" for v in vals) +
                  f" | {statistics.median(vals):.3f} | {statistics.mean(vals):.3f} | "
                  f"{at_goal} of {len(vals)} | {ci_text} |")


def main():
    goal, paths = None, []
    for a in sys.argv[1:]:
        if a == "--per-run":
            goal = 1.0
        elif a.startswith("--per-run="):
            try:
                goal = float(a.split("=", 1)[1])
            except ValueError:
                sys.exit(f"{a}: GOAL must be a number, e.g. --per-run=1.5")
        elif a.startswith("--"):
            sys.exit(f"{a}: unknown option\n{__doc__}")
        else:
            paths.append(a)
    if not paths:
        sys.exit(__doc__)
    runs = [ratios(parse(p)) for p in paths]
    keys = sorted(runs[0][0])
    for path, run in zip(paths[1:], runs[1:]):
        missing = [k for k in keys if k not in run[0]]
        if missing:
            sys.exit(f"{path}: no rows with {missing[0][0]} thread(s) at depth {missing[0][1]},"
                     f" which {paths[0]} has; give runs of the same thread counts and depths")
    threads = sorted({t for t, _ in keys})
    depths = sorted({d for _, d in keys})
    deepest = depths[-1]
    # The first run's specs, those that every run has (in every table).
    first = [kv for kv in runs[0][0][keys[0]] if kv != "_tps"]
    specs = [kv for kv in first if all(kv in run[0][k] for run in runs for k in keys)]
    if len(specs) < len(first):
        print("left out, not in every run: " +
              ", ".join(f"`{kv}`" for kv in first if kv not in specs))
    for t in threads:
        print(f"\n{t} thread(s), {len(runs)} runs:\n")
        head = " | ".join(str(d) for d in depths)
        print(f"| kv | bits/value at {deepest} | {head} | tok/s at {deepest} |")
        print("|---" * (len(depths) + 3) + "|")
        f16 = ", ".join(f"{r[1][(t, deepest)][0]:.1f}/{r[1][(t, deepest)][1]:.1f}" for r in runs)
        print(f"| `f16` (first / last) | 16.00 | " + " | ".join("1.00x" for _ in depths) +
              f" | {f16} |")
        for kv in specs:
            cells = []
            for d in depths:
                vals = [r[0][(t, d)][kv] for r in runs]
                med = statistics.median(vals)
                cells.append(f"{med:.2f}x ({min(vals):.2f}-{max(vals):.2f})" if len(vals) > 1
                             else f"{med:.2f}x")
            tps = ", ".join(f"{r[0][(t, deepest)]['_tps'][kv]:.1f}" for r in runs)
            b = runs[0][2][(kv, t, deepest)]
            print(f"| `{kv}` | {b:.2f} | " + " | ".join(cells) + f" | {tps} |")
        if goal is not None:
            print_per_run(runs, t, depths, specs, goal)


if __name__ == "__main__":
    main()
