"""The documentation stays true to the repository (no build needed).

1. No dead links: every relative link and image in the repository's markdown (README.md, CONTRIBUTING.md,
   docs/, results/, and every other tracked *.md outside tests/) names a file or folder that exists, and every
   #anchor names a heading of its target (GitHub's heading ids). A checker that finds nothing proves nothing,
   so it is first shown a planted dead link and a planted dead anchor.
2. Source paths named in the docs exist: a `core/...`, `fast/...`, ... path in backticks that names a source
   file, so a moved or renamed file cannot leave the docs pointing at nothing.
3. CONTRIBUTING.md's recipe for adding an operator is complete: every source file outside tests/ that holds an
   operator id in a string literal (a registration, a claim, a help text) or an `OpId::` enumerator (a dispatch
   by operator) is named in it. The operator ids are read from the operator table (core/operators.hpp,
   kOperators), so a new operator is covered too.
"""
import glob
import json
import os
import re
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOURCE_DIRS = ("claims", "cli", "configs", "core", "examples", "experiments", "fast", "io", "mpi", "numerics", "python",
               "reference", "scripts", "tests", "verify")
SOURCE_EXTS = (".cpp", ".hpp", ".py", ".sh", ".toml", ".md", ".txt")


def markdown_files(root=ROOT):
    """Every markdown file of the repository a reader meets (tracked or new), not test fixtures or build trees."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = [os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "**", "*.md"), recursive=True)]
    return sorted(p for p in out if not p.startswith(("tests/", "build")) and os.path.isfile(os.path.join(root, p)))


FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
# [text](target) and ![alt](target); the target stops at whitespace or ')' (an optional "title" follows).
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, INLINE_CODE.sub("", line)


def slug(heading):
    """GitHub's id for a heading: its text lowercased, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading contributes its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors(path):
    """The ids of a markdown file's headings, with GitHub's -1, -2 suffixes for repeats."""
    seen, ids = {}, set()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    return ids


def links(text):
    """(line number, target) of every inline link, image and reference definition in prose."""
    for number, line in prose_lines(text):
        for m in INLINE_LINK.finditer(line):
            yield number, m.group(1)
        m = REFERENCE_DEF.match(line)
        if m:
            yield number, m.group(1)


def dead_links(md_path, root=ROOT):
    """Every relative link of one markdown file that does not resolve, as 'file:line: target (why)'."""
    with open(md_path, encoding="utf-8") as f:
        text = f.read()
    found = []
    here = os.path.dirname(md_path)
    for number, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        where = f"{os.path.relpath(md_path, root)}:{number}: {target}"
        resolved = os.path.normpath(os.path.join(here, path)) if path else md_path
        if not os.path.exists(resolved):
            found.append(f"{where} (no such file)")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            found.append(f"{where} (no heading with id '{anchor}')")
    return found


# A source path in backticks: starts with a source folder, names a file by its extension; no wildcard,
# placeholder or brace ({a,b}, <target>, *) — those name families, not files.
CODE_PATH = re.compile(r"`((?:%s)/[A-Za-z0-9_./-]+?(?:%s))(?::\d+)?`"
                       % ("|".join(SOURCE_DIRS), "|".join(re.escape(e) for e in SOURCE_EXTS)))


def missing_code_paths(md_path, root=ROOT):
    with open(md_path, encoding="utf-8") as f:
        text = f.read()
    return [f"{os.path.relpath(md_path, root)}: `{p}`" for p in CODE_PATH.findall(text)
            if not os.path.exists(os.path.join(root, p))]


def operator_ids(root=ROOT):
    with open(os.path.join(root, "core", "operators.hpp"), encoding="utf-8") as f:
        return re.findall(r'\{OpId::\w+,\s*"([^"]+)"', f.read())


def files_naming_an_operator(root=ROOT):
    """Source files outside tests/ holding an operator id as a string literal, or an OpId enumerator."""
    ids = operator_ids(root)
    alternatives = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
    literal = re.compile(r"""["'](%s)["']|\bOpId::""" % alternatives)
    found = []
    for top in SOURCE_DIRS:
        if top in ("tests", "configs"):  # tests follow the registry; configs choose what to sweep
            continue
        for path in glob.glob(os.path.join(root, top, "**", "*"), recursive=True):
            if not path.endswith((".cpp", ".hpp", ".py", ".sh")) or not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                if literal.search(f.read()):
                    found.append(os.path.relpath(path, root))
    return sorted(found)


class DeadLinks(unittest.TestCase):
    def test_checker_finds_a_planted_dead_link_and_anchor(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "target.md"), "w", encoding="utf-8") as f:
                f.write("# The `hla2` operator: γ, ε and λ\n\n## Repeat\n\n## Repeat\n")
            page = os.path.join(tmp, "page.md")
            with open(page, "w", encoding="utf-8") as f:
                f.write("See [there](target.md#the-hla2-operator-γ-ε-and-λ), [again](target.md#repeat-1),\n"
                        "![a figure](missing.png) and [a section](target.md#no-such-section).\n"
                        "```\n[inside a code block](not-checked.md)\n```\n"
                        "`[inline code](not-checked-either.md)` and [web](https://example.org/x.md).\n")
            found = dead_links(page, tmp)
        self.assertEqual(len(found), 2, found)
        self.assertIn("missing.png (no such file)", found[0])
        self.assertIn("no heading with id 'no-such-section'", found[1])

    def test_every_relative_link_and_anchor_resolves(self):
        files = markdown_files()
        for required in ("README.md", "CONTRIBUTING.md", "docs/operators.md", "results/claims.md"):
            self.assertIn(required, files)
        dead = [d for md in files for d in dead_links(os.path.join(ROOT, md))]
        self.assertEqual(dead, [], "dead links:\n" + "\n".join(dead))

    def test_source_paths_named_in_the_docs_exist(self):
        missing = [m for md in markdown_files() for m in missing_code_paths(os.path.join(ROOT, md))]
        self.assertEqual(missing, [], "paths named in the docs that do not exist:\n" + "\n".join(missing))

    def test_readme_fits_on_a_few_screens(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            self.assertLessEqual(len(f.read().splitlines()), 300)


class OperatorTableCopy(unittest.TestCase):
    """results/operators.json is the operator table the plots read (experiments/plots/data.py): the binary's own."""

    def test_committed_table_is_the_binarys(self):
        hla = os.path.join(os.environ.get("HLA_BUILD", os.path.join(ROOT, "build")), "bin", "hla")
        self.assertTrue(os.path.exists(hla), f"{hla}: build first (make build)")
        out = subprocess.run([hla, "list", "--operators", "--json"], capture_output=True, text=True, check=True)
        with open(os.path.join(ROOT, "results", "operators.json"), encoding="utf-8") as f:
            committed = json.load(f)
        self.assertEqual(committed, json.loads(out.stdout),
                         "regenerate it: build/bin/hla list --operators --json > results/operators.json")
        self.assertEqual([row["id"] for row in committed], operator_ids())


class ContributingRecipe(unittest.TestCase):
    def test_operator_ids_are_read_from_the_table(self):
        self.assertIn("hla2", operator_ids())
        self.assertIn("softmax", operator_ids())

    def test_every_file_naming_an_operator_is_in_the_recipe(self):
        with open(os.path.join(ROOT, "CONTRIBUTING.md"), encoding="utf-8") as f:
            recipe = f.read()
        files = files_naming_an_operator()
        self.assertIn("fast/scan/operators.hpp", files)  # the scan finds a dispatch by OpId
        self.assertIn("reference/register.hpp", files)  # and a registration by literal
        absent = [p for p in files if p not in recipe]
        self.assertEqual(absent, [], "files that name an operator but are not in CONTRIBUTING.md's recipe "
                                     "(say there what a new operator needs in each):\n" + "\n".join(absent))


if __name__ == "__main__":
    unittest.main()
