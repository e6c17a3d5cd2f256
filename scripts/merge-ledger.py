#!/usr/bin/python3
"""Merges a partial ledger (`hla claims --id ... --out DIR` writes DIR/claims-partial.{json,md}) into the committed
results/claims.{json,md}: each claim re-run replaces its entry, a new claim is inserted at its place in the ledger's
order (`hla claims --list`), and the count line and a note in the header say which rows came from which run.
Usage: merge-ledger.py PARTIAL_DIR [RESULTS_DIR] [--hla build/bin/hla]"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def md_blocks(text):
    """(header, table rows by id, failing sections by id, tail) of a claims.md."""
    head, rest = text.split("| id | paper |", 1)
    table, after = rest.split("\n\n", 1)
    rows = {}
    for line in table.splitlines()[2:]:
        m = re.match(r"\| `([^`]+)` \|", line)
        if m:
            rows[m.group(1)] = line
    failing = {}
    tail = after
    if after.startswith("## Failing claims"):
        body, tail = after.split("\n## How verdicts are decided", 1)
        tail = "## How verdicts are decided" + tail
        for sec in re.split(r"\n(?=### `)", body.split("\n", 1)[1]):
            m = re.match(r"\s*### `([^`]+)`", sec)
            if m:
                failing[m.group(1)] = sec.strip("\n")
    return head, rows, failing, tail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("partial")
    ap.add_argument("results", nargs="?", default=os.path.join(ROOT, "results"))
    ap.add_argument("--hla", default=os.path.join(ROOT, "build", "bin", "hla"))
    args = ap.parse_args()
    order = subprocess.run([args.hla, "claims", "--list"], capture_output=True, text=True, check=True).stdout.split()
    order = [w for w in order if "." in w]
    with open(os.path.join(args.results, "claims.json")) as f:
        full = json.load(f)
    with open(os.path.join(args.partial, "claims-partial.json")) as f:
        part = json.load(f)
    new = {c["id"]: c for c in part["claims"]}
    unknown = [i for i in new if i not in order]
    if unknown:
        sys.exit(f"merge-ledger: not claims of this binary: {unknown}")
    by_id = {c["id"]: c for c in full["claims"]}
    by_id.update(new)
    full["claims"] = [by_id[i] for i in order if i in by_id]
    note = full["meta"].setdefault("partial_runs", [])
    keys = ("commit", "source_tree", "date", "cpu", "compiler", "flags", "seed", "quick")
    note.append({k: part["meta"].get(k) for k in keys} | {"ids": sorted(new)})
    with open(os.path.join(args.results, "claims.json"), "w") as f:
        json.dump(full, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(args.results, "claims.md")) as f:
        head, rows, failing, tail = md_blocks(f.read())
    with open(os.path.join(args.partial, "claims-partial.md")) as f:
        _, prow, pfail, tail = md_blocks(f.read())  # the binary's own "How verdicts are decided"
    rows.update(prow)
    for i in new:
        failing.pop(i, None)
    failing.update(pfail)
    verdicts = [c["verdict"] for c in full["claims"]]
    count = (f"**{len(verdicts)} claims: {verdicts.count('holds')} hold, {verdicts.count('fails')} fail, "
             f"{verdicts.count('inconclusive')} inconclusive.**")
    head = re.sub(r"\*\*\d+ claims: .*?\*\*", count, head)
    line = (f" The rows of {', '.join(f'`{i}`' for i in sorted(new))} were added or re-run by `hla claims --id ...` "
            f"at {part['meta'].get('source_tree', part['meta'].get('commit'))} ({part['meta'].get('date')}).")
    head = head.replace("\n\n" + count, line + "\n\n" + count, 1)
    table = "| id | paper | verdict | method | bound / fit |\n|---|---|---|---|---|\n"
    table += "\n".join(rows[i] for i in order if i in rows) + "\n"
    fails = [failing[i] for i in order if i in failing and by_id[i]["verdict"] == "fails"]
    body = head + table + "\n" + ("## Failing claims\n\n" + "\n\n".join(fails) + "\n\n" if fails else "") + tail
    with open(os.path.join(args.results, "claims.md"), "w") as f:
        f.write(body)
    print(f"merge-ledger: {len(new)} claims merged; {count.strip('*')}")


if __name__ == "__main__":
    main()
