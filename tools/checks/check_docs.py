#!/usr/bin/env python3
"""Checks that every command the README and docs/ show still runs.

A command is a line of a fenced code block that starts with `$ ` (and the lines it
continues with a trailing backslash). Each runs from the repository root under bash, with
`bazel-bin/` standing for the build the suite made, and must exit 0, or N where the command
says `# exit N`; the first line of output the docs show after it, numbers aside, must be one
it prints. `bazel build` commands are not run: the suite has built every target.

Every relative link (`[text](page.md#anchor)`, images too) must name a file that exists
and, with an anchor, a heading of that page.

docs/models.md's list of the ONNX operators the importer translates must be the one the
translation table (ops/onnx_mapping.json) gives; `--operators` rewrites it from the table.

A block whose commands cannot run here (an install prefix, a GPU, files the reader makes)
is preceded by a line `<!-- not checked: REASON -->`; the check lists each such block with
its reason, so none is skipped silently.

usage: check_docs.py BAZEL_BIN [FILE.md ...]   (default: README.md and docs/*.md)
       check_docs.py --list [FILE.md ...]       the commands, without running them
       check_docs.py --operators                rewrite docs/models.md's operator list
"""
import glob
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TIMEOUT = 900  # seconds for one command


class Command:
    def __init__(self, path, line, text, status):
        self.path, self.line, self.text, self.status = path, line, text, status
        self.shown = None  # the first line of output the docs show, if any

    def where(self):
        return f"{os.path.relpath(self.path, ROOT)}:{self.line}"


def commands(path):
    """The commands of one file, and the blocks it marks as not checked (where, reason)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    found, skipped = [], []
    in_fence = False
    skip_reason = None
    previous = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_fence = not in_fence
            if in_fence:
                m = re.match(r"<!-- not checked: (.+?) -->", previous.strip())
                skip_reason = m.group(1) if m else None
                if skip_reason:
                    skipped.append((f"{os.path.relpath(path, ROOT)}:{i + 1}", skip_reason))
            i += 1
            continue
        if in_fence and line.startswith("$ ") and skip_reason is None:
            start = i
            text = line[2:]
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1] + " " + lines[i].strip()
            m = re.search(r"#\s*exit (\d+)", text)
            found.append(Command(path, start + 1, text, int(m.group(1)) if m else 0))
            if i + 1 < len(lines) and not lines[i + 1].startswith(("$ ", "```", "...")):
                found[-1].shown = lines[i + 1]
        if line.strip():
            previous = line
        i += 1
    return found, skipped


def shape(line):
    """A line with its numbers masked: timings and sizes vary from run to run."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", line.strip())


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def broken_links(path):
    """The relative links of one file that name no file, or no heading of it."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code is not markdown
    out = []
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        line = text.count("\n", 0, m.start()) + 1
        if not os.path.exists(full):
            out.append(f"{os.path.relpath(path, ROOT)}: link to {target}: no such file")
            continue
        if anchor and full.endswith(".md"):
            headings = re.findall(r"^#+ (.*)$", open(full, encoding="utf-8").read(), flags=re.M)
            if anchor not in {slug(h) for h in headings}:
                out.append(f"{os.path.relpath(path, ROOT)}: link to {target}: no such heading")
    return out


MODELS = os.path.join(ROOT, "docs", "models.md")


def operator_list():
    """docs/models.md's operator list, from the translation table: every operator the
    library describes, with its library ops (six at most) and how it is translated."""
    with open(os.path.join(ROOT, "ops", "onnx_mapping.json")) as f:
        ops = json.load(f)["ops"]
    rows = []
    for name in sorted(ops):
        e = ops[name]
        if "tdl" not in e:
            continue
        how = f"C++ ({e['handler']})" if "handler" in e else "table rules"
        shown = f"{name} ({e['domain']})" if e.get("domain") else name
        tdl = [f"`{t}`" for t in e["tdl"]]
        if len(tdl) > 6:
            tdl = tdl[:6] + ["…"]
        rows.append(f"| {shown} | {', '.join(tdl)} | {how} |")
    return (f"<details><summary>The {len(rows)} ONNX operators the importer translates (from "
            "<code>ops/onnx_mapping.json</code>)</summary>\n\n| ONNX operator | library ops | "
            "translated by |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n\n")


def operator_block(text):
    """(start, end) of the operator list in docs/models.md's text, or None."""
    start = text.find("<details><summary>The ")
    end = text.find("</details>", start)
    return None if start < 0 or end < 0 else (start, end)


def main():
    args = sys.argv[1:]
    if args == ["--operators"]:
        with open(MODELS) as f:
            text = f.read()
        at = operator_block(text)
        if not at:
            sys.exit("check_docs: docs/models.md has no operator list (<details><summary>The ...)")
        with open(MODELS, "w") as f:
            f.write(text[:at[0]] + operator_list() + text[at[1]:])
        return 0
    listing = bool(args) and args[0] == "--list"
    if listing:
        args = args[1:]
    elif not args:
        sys.exit(__doc__.strip().split("\n\n")[-1])
    bazel_bin = None if listing else os.path.abspath(args.pop(0))
    files = args or [os.path.join(ROOT, "README.md")] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "*.md")))
    every, skipped = [], []
    for f in files:
        try:
            c, s = commands(f)
        except OSError as e:
            sys.exit(f"check_docs: cannot read {f}: {e.strerror}")
        every += c
        skipped += s
    if listing:
        for c in every:
            print(f"{c.where()}: {c.text}")
        for where, why in skipped:
            print(f"{where}: not checked: {why}")
        return 0
    failed = ran = 0
    links = [b for f in files for b in broken_links(f)]
    for b in links:
        print("FAIL " + b)
    if MODELS in [os.path.abspath(f) for f in files]:
        with open(MODELS) as f:
            text = f.read()
        at = operator_block(text)
        if not at or text[at[0]:at[1]] != operator_list():
            failed += 1
            print("FAIL docs/models.md: its operator list is not the translation table's "
                  "(tools/checks/check_docs.py --operators rewrites it)")
    for c in every:
        if re.match(r"\s*bazel (build|run)\b", c.text):
            continue
        text = c.text.replace("bazel-bin/", bazel_bin + "/")
        start = time.monotonic()
        try:
            r = subprocess.run(["bash", "-c", text], cwd=ROOT, capture_output=True, text=True,
                               timeout=TIMEOUT)
            status, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            status, out = None, f"(no exit within {TIMEOUT} s)"
        ran += 1
        seconds = time.monotonic() - start
        stale = c.shown is not None and status == c.status and \
            shape(c.shown) not in {shape(l) for l in out.split("\n")}
        if stale:
            failed += 1
            print(f"FAIL {c.where()}: {c.text}\n     the docs show the output line\n"
                  f"     | {c.shown}\n     which it no longer prints (numbers aside); it prints:")
            for l in out.strip().split("\n")[:6]:
                print("     | " + l)
        elif status == c.status:
            print(f"ok   {c.where()} ({seconds:.1f} s): {c.text[:90]}")
        else:
            failed += 1
            print(f"FAIL {c.where()}: {c.text}\n     exit {status}, the docs say {c.status}; "
                  f"its output ends:")
            for l in out.strip().split("\n")[-12:]:
                print("     | " + l)
    for where, why in skipped:
        print(f"not checked {where}: {why}")
    print(f"docs: {ran - failed} of {ran} commands ran as shown, {failed} failed; "
          f"{len(skipped)} blocks marked not checked; {len(links)} broken links")
    return 1 if failed or links else 0


if __name__ == "__main__":
    sys.exit(main())
