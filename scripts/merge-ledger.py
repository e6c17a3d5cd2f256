#!/usr/bin/python3
"""Merges a partial ledger (`hla claims --id ... --out DIR` writes DIR/claims-partial.{json,md}) into the committed
results/claims.{json,md}: each claim re-run replaces its entry, a new claim is inserted at its place in the ledger's
order (`hla claims --list`), and the count line and a note in the header say which rows came from which run.
Every input is read and checked (regular files, JSON and tables of the expected form) before anything is written, and
both files are then written whole (a temporary file renamed): a malformed input is one line on stderr and exit 2, the
ledger untouched. Merging the same partial run again adds its note once.
Usage: merge-ledger.py PARTIAL_DIR [RESULTS_DIR] [--hla build/bin/hla]"""
import argparse
import json
import os
import re
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LedgerError(Exception):
    """A malformed or unusable input: one line on stderr and exit 2, nothing written."""


def read_text(path, limit=64 << 20):
    """The text of a regular file (a FIFO would block the open, a device never end), at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise LedgerError(f"{path}: cannot read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LedgerError(f"{path}: not a regular file")
        if st.st_size > limit:
            raise LedgerError(f"{path}: {st.st_size} bytes, more than the {limit} accepted")
        os.set_blocking(fd, True)
        data = b""
        while chunk := os.read(fd, 1 << 20):
            data += chunk
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LedgerError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_ledger_json(path):
    """A ledger (claims.json or claims-partial.json): {"meta": {...}, "claims": [{"id": str, "verdict": str}, ...]}."""
    def refuse_constant(name):  # Python's json reads NaN and Infinity, which are not JSON (nlohmann refuses them)
        raise LedgerError(f"{path}: not JSON ({name} is not a JSON number)")

    try:
        ledger = json.loads(read_text(path), parse_constant=refuse_constant)
        json.dumps(ledger, ensure_ascii=False).encode("utf-8")
    except (json.JSONDecodeError, RecursionError) as e:
        raise LedgerError(f"{path}: not JSON ({e})") from None
    except UnicodeEncodeError as e:  # "\ud800" escaped in valid UTF-8: a lone surrogate, no character
        raise LedgerError(f"{path}: a string holds {e.object[e.start:e.end]!r}, which is not text") from None
    if not isinstance(ledger, dict) or not isinstance(ledger.get("meta"), dict) \
            or not isinstance(ledger.get("claims"), list):
        raise LedgerError(f"{path}: not a ledger (an object with 'meta' and a list 'claims')")
    for k, c in enumerate(ledger["claims"]):
        if not isinstance(c, dict) or not isinstance(c.get("id"), str) or not isinstance(c.get("verdict"), str):
            raise LedgerError(f"{path}: claim {k} has no string 'id' and 'verdict'")
    partial_runs = ledger["meta"].get("partial_runs", [])
    if not isinstance(partial_runs, list):
        raise LedgerError(f"{path}: meta.partial_runs is not a list")
    return ledger


def md_blocks(text, path):
    """(header, table rows by id, failing sections by id, tail) of a claims.md."""
    if "| id | paper |" not in text:
        raise LedgerError(f"{path}: no claims table ('| id | paper |')")
    head, rest = text.split("| id | paper |", 1)
    if "\n\n" not in rest:
        raise LedgerError(f"{path}: the claims table does not end")
    table, after = rest.split("\n\n", 1)
    rows = {}
    for line in table.splitlines()[2:]:
        m = re.match(r"\| `([^`]+)` \|", line)
        if m:
            rows[m.group(1)] = line
    failing = {}
    tail = after
    if after.startswith("## Failing claims"):
        if "\n## How verdicts are decided" not in after or "\n" not in after:
            raise LedgerError(f"{path}: '## Failing claims' without '## How verdicts are decided' after it")
        body, tail = after.split("\n## How verdicts are decided", 1)
        tail = "## How verdicts are decided" + tail
        for sec in re.split(r"\n(?=### `)", body.partition("\n")[2]):  # an empty section has none
            m = re.match(r"\s*### `([^`]+)`", sec)
            if m:
                failing[m.group(1)] = sec.strip("\n")
    return head, rows, failing, tail


def write_atomically(path, data):
    """A fresh file beside `path` (O_EXCL: never a planted one), then renamed over it."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def merge(args):
    """Reads and checks every input, then computes both files' bytes; nothing is written here."""
    try:
        listed = subprocess.run([args.hla, "claims", "--list"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise LedgerError(f"cannot run '{args.hla} claims --list': {e}") from None
    order = [w for w in listed.stdout.split() if "." in w]
    full_json = os.path.join(args.results, "claims.json")
    full_md = os.path.join(args.results, "claims.md")
    full = read_ledger_json(full_json)
    part = read_ledger_json(os.path.join(args.partial, "claims-partial.json"))
    head, rows, failing, _ = md_blocks(read_text(full_md), full_md)
    part_md = os.path.join(args.partial, "claims-partial.md")
    _, prow, pfail, tail = md_blocks(read_text(part_md), part_md)  # the binary's own "How verdicts are decided"
    new = {c["id"]: c for c in part["claims"]}
    for path, ledger, table, sections in ((full_md, full, rows, failing), (part_md, part, prow, pfail)):
        ids = {c["id"] for c in ledger["claims"]}
        if set(table) != ids or not set(sections) <= ids:
            raise LedgerError(f"{path}: its table's or failing sections' claims are not those of its JSON ledger "
                              f"({sorted(set(table) ^ ids)[:5] or sorted(set(sections) - ids)[:5]})")
    unknown = [i for i in new if i not in order]
    if unknown:
        raise LedgerError(f"not claims of this binary: {unknown}")
    by_id = {c["id"]: c for c in full["claims"]}
    by_id.update(new)
    full["claims"] = [by_id[i] for i in order if i in by_id]
    note = full["meta"].setdefault("partial_runs", [])
    keys = ("commit", "source_tree", "date", "cpu", "compiler", "flags", "seed", "quick")
    run = {k: part["meta"].get(k) for k in keys} | {"ids": sorted(new)}
    already = run in note  # the same partial merged again: its note once
    if not already:
        note.append(run)
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
    if line not in head:
        head = head.replace("\n\n" + count, line + "\n\n" + count, 1)
    table = "| id | paper | verdict | method | bound / fit |\n|---|---|---|---|---|\n"
    table += "\n".join(rows[i] for i in order if i in rows) + "\n"
    fails = [failing[i] for i in order if i in failing and by_id[i]["verdict"] == "fails"]
    body = head + table + "\n" + ("## Failing claims\n\n" + "\n\n".join(fails) + "\n\n" if fails else "") + tail
    try:  # both files' bytes before either is written: a failure here leaves the ledger whole
        out = (full_json, (json.dumps(full, indent=2, ensure_ascii=False) + "\n").encode("utf-8")), \
              (full_md, body.encode("utf-8"))
    except (RecursionError, UnicodeEncodeError) as e:
        raise LedgerError(f"the merged ledger cannot be written as JSON and UTF-8 text: {e}") from None
    return out[0], out[1], len(new), count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("partial")
    ap.add_argument("results", nargs="?", default=os.path.join(ROOT, "results"))
    ap.add_argument("--hla", default=os.path.join(ROOT, "build", "bin", "hla"))
    args = ap.parse_args()
    try:
        json_out, md_out, merged, count = merge(args)
        for path, text in (json_out, md_out):
            write_atomically(path, text)
    except (LedgerError, OSError) as e:
        print(f"merge-ledger: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"merge-ledger: {merged} claims merged; {count.strip('*')}")


if __name__ == "__main__":
    main()
