#!/usr/bin/python3
"""Every relative link in the repository's Markdown resolves.

Usage: check_links.py REPO_ROOT

Checks README.md, docs/*.md and every other tracked *.md file: each inline
link or image `[text](target)` and each reference definition `[id]: target`
outside code must name a file or directory that exists, and its anchor
(`file.md#section`, `#section`) a heading of that file, as GitHub makes
anchors from headings (lower case; punctuation but '-' and '_' dropped; spaces
to '-'; a repeated heading gets -1, -2, ...) or an explicit <a id/name="...">.
URLs with a scheme (https:, mailto:) are not fetched. Standard library only.
"""
import difflib
import os
import re
import subprocess
import sys
import urllib.parse

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)=\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of each line outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif m.group(1) == fence:
                    fence = None
                continue
            if fence is None:
                yield n, line


anchor_cache = {}


def anchors(path):
    """The anchors a file offers: its headings' (code spans' text included) and <a id=...>."""
    if path not in anchor_cache:
        found, seen = set(), {}
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(HTML_ANCHOR.findall(line))
        anchor_cache[path] = found
    return anchor_cache[path]


def markdown_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "*.md"], capture_output=True, text=True, check=True)
        files = [f for f in out.stdout.splitlines() if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".md")]
    return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))


def check(root, rel):
    errors = []
    path = os.path.join(root, rel)
    for n, line in lines_outside_code(path):
        line = CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)  # `[a](b)` in code is no link
        targets = [m.group(1) for m in INLINE.finditer(line)]
        m = REFDEF.match(line)
        if m:
            targets.append(m.group(1))
        for target in targets:
            target = target.strip("<>")
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            file_part, _, anchor = target.partition("#")
            file_part = urllib.parse.unquote(file_part)
            if file_part.startswith("/"):
                errors.append(f"{rel}:{n}: {target}: an absolute path; link relative to {os.path.dirname(rel) or '.'}/")
                continue
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.realpath(dest).startswith(os.path.realpath(root) + os.sep) and dest != root:
                errors.append(f"{rel}:{n}: {target}: points outside the repository")
                continue
            if not os.path.exists(dest):
                errors.append(f"{rel}:{n}: {target}: no such file {os.path.relpath(dest, root)}")
                continue
            if anchor and dest.endswith(".md") and os.path.isfile(dest):
                known = anchors(dest)
                if anchor not in known:
                    near = difflib.get_close_matches(anchor, sorted(known), n=1)
                    hint = f" (did you mean #{near[0]}?)" if near else ""
                    errors.append(f"{rel}:{n}: {target}: no heading #{anchor} in {os.path.relpath(dest, root)}{hint}")
    return errors


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = os.path.realpath(sys.argv[1])
    files = markdown_files(root)
    errors = [e for rel in files for e in check(root, rel)]
    for e in errors:
        print("FAIL:", e, file=sys.stderr)
    if errors:
        print(f"{len(errors)} broken link(s) in {len(files)} Markdown files", file=sys.stderr)
        sys.exit(1)
    print(f"ok: every relative link and anchor in {len(files)} Markdown files resolves")


if __name__ == "__main__":
    main()
