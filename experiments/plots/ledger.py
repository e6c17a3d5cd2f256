"""The claims ledger (results/claims.json) as a picture: claims × verdict, grouped by section of the paper.

A claim that fails and whose `<id>.corrected` claim holds counts as "fails, corrected holds"; the corrected
claims themselves are not counted again. The gated-decay entries (`gated.*`, beyond the paper) are not drawn: the
figure is the paper's claims. Writes claims.{pdf,svg,png} beside the JSON.
"""
import json
import os
import re
from collections import OrderedDict

from matplotlib.patches import Patch

from . import style

VERDICT_COLOR = OrderedDict([
    ("holds", style.FAMILY_COLOR["chunked"]),      # bluish green
    ("fails, corrected holds", style.FAMILY_COLOR["scan"]),  # orange
    ("fails", style.FAMILY_COLOR["decode"]),       # vermillion
    ("inconclusive", "#999999"),
])

SECTIONS = OrderedDict([
    ("3", "§3 second order (streaming)"),
    ("4", "§4 scans, decay, backward"),
    ("5", "§5 ridge, multi-query"),
    ("6", "§6 AHLA"),
    ("7", "§7 third order"),
    ("fig", "Figures 1(C), 2(C): chunk forms"),
    ("cost", "Cost claims (§1, §5–7, §9)"),
])
ALGORITHM_SECTION = {"1": "4", "2": "6", "3": "7", "4": "7"}


def section(claim):
    if claim["id"].startswith("cost."):
        return "cost"
    paper = claim.get("paper", "")
    if paper.startswith("Figure"):
        return "fig"
    m = re.search(r"(?:§|Thm |eq\. |Alg\. )(\d+)", paper)
    if not m:
        return "cost"
    num = m.group(1)
    if paper[m.start():].startswith("Alg."):
        num = ALGORITHM_SECTION.get(num, num)
    return num if num in SECTIONS else "cost"


def classify(claims):
    """[(claim, verdict class)] without the .corrected claims, which are folded into their failing claim."""
    by_id = {c["id"]: c for c in claims}
    out = []
    for c in claims:
        if c["id"].endswith(".corrected"):
            continue
        v = c["verdict"]
        if v == "fails":
            fix = by_id.get(c["id"] + ".corrected")
            out.append((c, "fails, corrected holds" if fix and fix["verdict"] == "holds" else "fails"))
        elif v == "holds":
            out.append((c, "holds"))
        else:
            out.append((c, "inconclusive"))
    return out


def draw(path):
    outdir = os.path.dirname(os.path.abspath(path))
    stem = os.path.splitext(os.path.basename(path))[0]
    with open(path) as f:
        data = json.load(f)
    paper_claims = [c for c in data["claims"] if not c["id"].startswith("gated.")]
    rows = classify(paper_claims)
    counts = OrderedDict((s, OrderedDict((v, 0) for v in VERDICT_COLOR)) for s in SECTIONS)
    for c, v in rows:
        counts[section(c)][v] += 1
    sections = [s for s in SECTIONS if sum(counts[s].values())]
    fig, axes = style.figure(1, width=style.TWO_COL, height=0.3 * len(sections) + 0.9)
    ax = axes[0]
    for i, s in enumerate(sections):
        left = 0
        for v, color in VERDICT_COLOR.items():
            k = counts[s][v]
            if not k:
                continue
            ax.barh(i, k, left=left, color=color, edgecolor="white", lw=0.8)
            ax.text(left + k / 2, i, str(k), ha="center", va="center", fontsize=7, color="white", fontweight="bold")
            left += k
    ax.set_yticks(range(len(sections)))
    ax.set_yticklabels([SECTIONS[s] for s in sections])
    ax.invert_yaxis()
    ax.set_xlabel("claims")
    ax.grid(axis="y", visible=False)
    used = [v for v in VERDICT_COLOR if any(counts[s][v] for s in sections)]
    style.legend_below(fig, [Patch(color=VERDICT_COLOR[v], label=v) for v in used], ncol=len(used))
    total = {v: sum(counts[s][v] for s in sections) for v in VERDICT_COLOR}
    n_corr = sum(1 for c in paper_claims if c["id"].endswith(".corrected"))
    fails = [c["id"] for c, v in rows if v not in ("holds", "inconclusive")]
    open_ = [c["id"] for c, v in rows if v == "inconclusive"]
    reading = (f"{len(rows)} claims of the paper: {total['holds']} hold, "
               f"{total['fails, corrected holds']} fail with a corrected formula that holds, {total['fails']} fail "
               f"without one" + (f", {total['inconclusive']} inconclusive" if total["inconclusive"] else "")
               + f" ({n_corr} corrected claims verified; failing: {', '.join(fails)}"
               + (f"; inconclusive: {', '.join(open_)}" if open_ else "") + ").")
    meta = data.get("meta", {})
    if meta.get("commit"):
        reading = reading[:-1] + f"; ledger at commit {meta['commit']})."
    style.save(fig, outdir, stem, "Which of the paper's claims hold?", reading, key=True)
    return outdir
