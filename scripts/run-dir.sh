#!/usr/bin/env bash
# The default run directory of `make run` and `make publish`: runs/<host>-<commit>, with -dirty when tracked files
# have uncommitted changes (runs/ is not tracked).
root=$(cd "$(dirname "$0")/.." && pwd)
host=$(hostname -s 2>/dev/null || hostname)
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo -dirty)
echo "runs/$host-$commit$dirty"
