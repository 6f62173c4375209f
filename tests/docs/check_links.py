#!/usr/bin/env python3
"""Checks that every relative link in README.md, CHANGELOG.md and docs/**/*.md (raw results READMEs excluded) points
at a file or folder that exists. Links leaving the repository (../shared/...) and URLs are not checked.
Usage: python3 tests/docs/check_links.py [--allow-missing PATH]... [repo root]; exit status 1 lists the broken links.
--allow-missing names a page another change is adding (reported, not failed)."""
import pathlib
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages(root):
    yield from (root / n for n in ("README.md", "CHANGELOG.md") if (root / n).exists())
    for p in sorted((root / "docs").rglob("*.md")):
        if "results" not in p.relative_to(root / "docs").parts[:1]:
            yield p


def main():
    args, allowed = sys.argv[1:], set()
    while len(args) >= 2 and args[0] == "--allow-missing":
        allowed.add(args[1])
        args = args[2:]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parents[2]).resolve()
    broken, checked = [], 0
    for page in pages(root):
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if root not in path.parents and path != root:
                continue  # outside the repository (../shared/...)
            checked += 1
            if not path.exists():
                if str(path.relative_to(root)) in allowed:
                    print(f"check_links: {page.relative_to(root)}: {target} does not exist yet (allowed)")
                else:
                    broken.append(f"{page.relative_to(root)}: {target}")
    for b in broken:
        print("broken link:", b)
    print(f"check_links: {checked} relative links, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
