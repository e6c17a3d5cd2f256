"""results/report.html as a user sees it: built from the committed results/ into a temporary directory and
rendered in headless Chromium (Debian's `chromium`), at a desktop and a narrow window width.

Checks: every <img> loaded (complete, naturalWidth > 0), nothing overflows horizontally (scrollWidth ≤ window
width), every figure has a question and a reading, and the failing claims are listed. A small script added to
the temporary copy (not to the product page) writes the measurements into the DOM, read back with --dump-dom.

Skips only when chromium is absent and CI is unset (CI installs it: scripts/install-deps.sh). Keep the
screenshots with HLA_REPORT_SCREENSHOTS=<dir>.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments"))

import report  # noqa: E402

CHECK = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                .map(function (i) { return i.src; });
  var wide = Array.prototype.slice.call(document.querySelectorAll('main *')).filter(function (e) {
    return e.getBoundingClientRect().right > window.innerWidth + 1; }).slice(0, 5).map(function (e) {
    return e.tagName + (e.id ? '#' + e.id : '') + ' ' + (e.textContent || '').slice(0, 60); });
  var out = document.createElement('pre');
  out.id = 'hla-check';
  out.textContent = JSON.stringify({images: imgs.length, broken: bad, scrollWidth: document.documentElement.scrollWidth,
                                    innerWidth: window.innerWidth, wide: wide});
  document.body.appendChild(out);
});
</script>
"""


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class ReportRendersInChromium(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.browser = chromium()
        if cls.browser is None and not os.environ.get("CI"):
            raise unittest.SkipTest("chromium is not installed (and CI is unset)")
        cls.tmp = tempfile.mkdtemp(prefix="hla-report-")
        cls.page = report.build(os.path.join(ROOT, "results"), os.path.join(cls.tmp, "site", "report.html"))
        with open(cls.page) as f:
            cls.html = f.read()
        cls.checked = os.path.join(cls.tmp, "site", "report-checked.html")
        with open(cls.checked, "w") as f:
            f.write(cls.html.replace("</body>", CHECK + "</body>"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    def chrome(self, *args):
        self.assertIsNotNone(self.browser, "CI is set but chromium is missing: scripts/install-deps.sh installs it")
        cmd = [self.browser, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
               "--allow-file-access-from-files", f"--user-data-dir={os.path.join(self.tmp, 'profile')}",
               "--virtual-time-budget=15000", *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        return r.stdout

    def measure(self, width):
        dom = self.chrome(f"--window-size={width},1000", "--dump-dom", "file://" + self.checked)
        m = re.search(r'<pre id="hla-check">(.*?)</pre>', dom, re.S)
        self.assertIsNotNone(m, "the check script did not run: " + dom[-500:])
        return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;",
                                                                                                               ">"))

    def test_every_image_loads_and_nothing_overflows(self):
        for width in (1280, 700):
            with self.subTest(width=width):
                got = self.measure(width)
                self.assertGreaterEqual(got["images"], 10, got)
                self.assertEqual(got["broken"], [], got)
                self.assertLessEqual(got["scrollWidth"], got["innerWidth"], got)
                self.assertEqual(got["wide"], [], got)

    def test_screenshot(self):
        shot = os.path.join(self.tmp, "report.png")
        self.chrome("--window-size=1280,4000", f"--screenshot={shot}", "file://" + self.page)
        self.assertGreater(os.path.getsize(shot), 10000)
        keep = os.environ.get("HLA_REPORT_SCREENSHOTS")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(shot, os.path.join(keep, "report.png"))

    def test_content(self):
        self.assertNotRegex(self.html, r'(src|href)="(https?:)?//', "the page must not load anything from the network")
        figures = re.findall(r"<figure .*?</figure>", self.html, re.S)
        self.assertGreaterEqual(len(figures), 10)
        for fig in figures:
            self.assertRegex(fig, r'<span class="q">[^<]+\?</span> \S',
                             "every figure states its question and a reading")
        captions = re.findall(r'<figcaption><span class="q">([^<]+)</span> (?:<span class="shows">([^<]+)</span>)?',
                              self.html)
        self.assertEqual(len(captions), len(figures))
        repeated = sorted({c for c in captions if captions.count(c) > 1})
        self.assertEqual(repeated, [], "every figure's caption says what that figure shows")
        self.assertIn("<b>The published run</b>", self.html)
        with open(os.path.join(ROOT, "results", "claims.json")) as f:
            claims = json.load(f)["claims"]
        for c in claims:
            if c["verdict"] == "fails":
                self.assertIn(f"<code>{c['id']}</code>", self.html)
        self.assertIn("Machine, compiler, commit", self.html)


if __name__ == "__main__":
    unittest.main()
