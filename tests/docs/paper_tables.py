#!/usr/bin/env python3
"""docs/results.md's priced tables are what the code gives: runs
`paper_compare predicted` into a temporary folder and compares its tables with the page's
"generated: predicted" section, as scripts/paper writes it. On a difference: the first lines
that differ, and `scripts/paper` regenerates the page.

Usage: paper_tables.py PAPER_COMPARE DOCS_RESULTS_MD"""
import difflib
import pathlib
import re
import subprocess
import sys
import tempfile

compare, docs = sys.argv[1], pathlib.Path(sys.argv[2])
with tempfile.TemporaryDirectory() as out:
    subprocess.run([compare, "predicted", out], check=True, capture_output=True, text=True)
    body = (pathlib.Path(out) / "predicted.md").read_text().split("\n", 1)[1].strip("\n")
m = re.search(r"<!-- generated: predicted -->\n(.*?)\n<!-- end generated: predicted -->", docs.read_text(), re.S)
if not m:
    sys.exit("docs/results.md lacks the markers <!-- generated: predicted --> ... <!-- end generated: predicted -->")
if m.group(1) == body:
    print(f"docs/results.md's priced tables equal paper_compare's ({body.count(chr(10)) + 1} lines)")
    sys.exit(0)
diff = list(difflib.unified_diff(m.group(1).splitlines(), body.splitlines(), "docs/results.md", "paper_compare", n=0,
                                 lineterm=""))
print("\n".join(diff[:40]))
print(f"FAIL docs/results.md's priced tables differ from what the code gives now ({len(diff)} diff lines); "
      "regenerate them with scripts/paper")
sys.exit(1)
