#!/usr/bin/env python3
"""A build's timeline from <build>/unit-times.tsv (scripts/unit-time.sh records each compile and link with its
start): how long the build ran, how many jobs ran at once for how long, how many core-seconds the cores idled
with work left, and the jobs the build ended on. `build-timeline.py [build] [jobs] [last]`; CI prints it.

Idle core-seconds are measured against `jobs` (default: this machine's cores): a build that keeps every core busy
to its end has none, and its wall time is its CPU time over the cores."""
import os
import sys


def main() -> int:
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else (os.cpu_count() or 1)
    last = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    path = os.path.join(build, "unit-times.tsv")
    records = {}
    try:
        with open(path) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) < 4:  # recorded before starts were (no timeline)
                    continue
                wall, cpu, out, start = float(fields[0]), float(fields[1]), fields[2], float(fields[3])
                records[out] = (start, start + wall, cpu)  # a rebuild's record replaces the first
    except OSError:
        print(f"build-timeline: no {path}")
        return 0
    if not records:
        print(f"build-timeline: {path} has no start times")
        return 0
    t0 = min(r[0] for r in records.values())
    t1 = max(r[1] for r in records.values())
    events = sorted([(r[0], 1) for r in records.values()] + [(r[1], -1) for r in records.values()])
    running, now, idle, at = 0, t0, 0.0, {}
    for t, step in events:
        at[running] = at.get(running, 0.0) + t - now
        idle += max(jobs - running, 0) * (t - now)
        running, now = running + step, t
    cpu = sum(r[2] for r in records.values())
    print(f"build-timeline: {len(records)} compiles and links over {t1 - t0:.0f} s, {cpu / 60:.1f} CPU min; "
          f"{idle:.0f} core-s idle at {jobs} jobs; seconds with k jobs running: " +
          ", ".join(f"{k}: {v:.0f}" for k, v in sorted(at.items())))
    print(f"build-timeline: the last {last} to end (start, end in s from the first start; CPU s):")
    for start, end, c, out in sorted((r[0], r[1], r[2], o) for o, r in records.items())[-last:]:
        name = out.split("CMakeFiles/")[-1].replace(".dir/", ": ")
        print(f"  {start - t0:7.1f} {end - t0:7.1f} {c:6.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
