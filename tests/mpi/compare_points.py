"""Compares two sweep outputs (points.csv) row by row, by key: every key exactly once in each, and equal
fields except the ones that measure the run (timings, memory, host, rank, date).

usage: compare_points.py A/points.csv B/points.csv  -> exit 0 when equal, 1 with the differences."""
import csv
import sys

RUN_DEPENDENT = {"time_median_s", "time_min_s", "time_max_s", "time_iqr_s", "tokens_per_s", "cpu_time_median_s",
                 "threads_used", "peak_rss_delta_bytes", "host", "rank", "ranks_on_host", "load_1min", "date"}


def rows(path):
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    keys = [r["key"] for r in table]
    dup = {k for k in keys if keys.count(k) > 1}
    return {r["key"]: r for r in table}, dup


def main(a, b):
    ra, da = rows(a)
    rb, db = rows(b)
    problems = [f"{a}: duplicated {k}" for k in sorted(da)] + [f"{b}: duplicated {k}" for k in sorted(db)]
    problems += [f"only in {a}: {k}" for k in sorted(set(ra) - set(rb))]
    problems += [f"only in {b}: {k}" for k in sorted(set(rb) - set(ra))]
    for k in sorted(set(ra) & set(rb)):
        for col in ra[k]:
            if col not in RUN_DEPENDENT and ra[k][col] != rb[k].get(col):
                problems.append(f"{k}: {col}: {ra[k][col]!r} != {rb[k].get(col)!r}")
    for p in problems[:20]:
        print(p)
    print(f"compared {len(ra)} and {len(rb)} rows: {'equal' if not problems else f'{len(problems)} differences'}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
