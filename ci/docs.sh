#!/usr/bin/env bash
# The documentation (mkdocs.yml, docs/), in CI after the test command:
#  1. docs/configuration.md is the page docs/gen_configuration.py writes from
#     the installed _myplugin.DEFAULTS (so $PYTHON must have this checkout
#     installed);
#  2. the site builds with `mkdocs build --strict`: a link to a missing page
#     or heading, or a page left out of the nav, is an error;
#  3. every link of the README into docs/ names a page, and a heading of it,
#     that exist in the built site (mkdocs does not read the README).
# MkDocs and Material, pinned, go into a throwaway virtual environment; the
# site is built into a temporary folder. Nothing is left in the checkout.
#
#   bash ci/docs.sh        # PYTHON=python by default
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}

"$python" docs/gen_configuration.py --check

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check \
  mkdocs==1.6.1 mkdocs-material==9.8.2 pymdown-extensions==13.1.2
# Material 9.7+ prints a banner about MkDocs 2 on every build.
NO_MKDOCS_2_WARNING=1 "$tmp/venv/bin/mkdocs" build --strict --site-dir "$tmp/site"

"$python" - "$tmp/site" <<'EOF'
import os
import re
import sys

site = sys.argv[1]
bad = []
for target, anchor in re.findall(r"\]\((docs/[^)#\s]+)(#[^)\s]*)?\)", open("README.md").read()):
  if not os.path.exists(target):
    bad.append(f"{target}: no such file")
  elif anchor and target.endswith(".md"):
    page = os.path.relpath(target, "docs")[:-3]
    html = os.path.join(site, "" if page == "index" else page, "index.html")
    if f'id="{anchor[1:]}"' not in open(html).read():
      bad.append(f"{target}{anchor}: no such heading")
for line in bad:
  print(f"README.md links to {line}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
echo "docs: configuration.md current, the site builds strictly, the README's links resolve"
