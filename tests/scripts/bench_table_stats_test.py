#!/usr/bin/env python3
"""Checks scripts/bench-table.py's confidence interval against published figures.

Run by ctest (scripts.BenchTable.Statistics): python3 bench_table_stats_test.py BENCH_TABLE_PY
"""
import importlib.util
import math
import sys

spec = importlib.util.spec_from_file_location("bench_table", sys.argv[1])
bench_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_table)

# Two-sided 95% points of Student's t (the 0.975 quantile), as tabulated in Abramowitz and
# Stegun, Handbook of Mathematical Functions, Table 26.10, to three decimals.
PUBLISHED = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
             9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 23: 2.069, 30: 2.042}
failures = []
for df, want in PUBLISHED.items():
    got = bench_table.t_quantile_95(df)
    if abs(got - want) > 0.0006:
        failures.append(f"t_quantile_95({df}) = {got:.4f}, published {want}")

# mean 1.0, sample standard deviation 0.1 over 4 runs: 1.0 -/+ 3.182 * 0.1 / 2.
vals = [1.0 - 0.1 * math.sqrt(3) / 2, 1.0 - 0.1 * math.sqrt(3) / 2,
        1.0 + 0.1 * math.sqrt(3) / 2, 1.0 + 0.1 * math.sqrt(3) / 2]
low, high = bench_table.mean_interval(vals)
if abs(low - (1.0 - 0.1591)) > 0.0002 or abs(high - (1.0 + 0.1591)) > 0.0002:
    failures.append(f"mean_interval: {low:.4f}-{high:.4f}, want 0.8409-1.1591")
if bench_table.mean_interval([1.0]) is not None:
    failures.append("mean_interval of one run: want None")

if failures:
    sys.exit("\n".join(failures))
print("ok: t quantiles and the mean's interval")
