#!/usr/bin/env python3
"""Checks that `tdlc --check` accepts every example of shared/docs/TDL.md.

The examples are read from the document itself (so the check follows the document):
sections 4 and 5 verbatim, section 6 with the two ops its example calls, and the
declarations of sections 2 and 3 with their '...' placeholders filled in.

usage: check_tdl_md.py TDLC [TDL.md]
"""
import os
import re
import subprocess
import sys
import tempfile


def sections(text):
    """Maps a section number ('4') to its fenced code blocks."""
    out = {}
    current = None
    for part in re.split(r"^(## \d+\..*)$", text, flags=re.M):
        m = re.match(r"## (\d+)\.", part)
        if m:
            current = m.group(1)
            continue
        if current:
            out.setdefault(current, []).extend(re.findall(r"```\n(.*?)```", part, flags=re.S))
    return out


def main():
    tdlc = os.path.abspath(sys.argv[1])
    doc = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared", "docs", "TDL.md")
    try:
        text = open(doc, encoding="utf-8").read()
    except OSError as e:
        sys.exit(f"check_tdl_md: cannot read the TDL reference {os.path.normpath(doc)}: "
                 f"{e.strerror} (give its path as the second argument; by default it is "
                 f"shared/docs/TDL.md beside the checkout)")
    blocks = sections(text)
    cases = {}
    cases["section4.tdl"] = "\n".join(blocks["4"])
    cases["section5.tdl"] = "\n".join(blocks["5"])
    cases["section6.tdl"] = "\n".join(blocks["6"]) + (
        "\nop matmul_nt(A, B) = lambda i, j: Sum(lambda k: A[i, k] * B[j, k]);"
        "\nop matmul_tn(A, B) = lambda i, j: Sum(lambda k: A[k, i] * B[k, j]);\n")
    # Section 2: the import and opaque lines are literal TDL; the op line is a template.
    decls = [l for l in blocks["2"][0].splitlines() if l.startswith(("import", "opaque"))]
    cases["section2.tdl"] = "\n".join(decls) + "\n"
    # Section 3: the conv1d body, and the pad1d declaration with its '...' filled in.
    lam = [b.strip() for b in blocks["3"] if b.strip().startswith("lambda")]
    cases["section3.tdl"] = "op conv1d(data, filters) = %s;\n" % lam[0]
    pad = re.search(r"`(op pad1d<P>\(x\) -> \[.*?\] = )\.\.\.`", text)
    cases["section3.tdl"] += pad.group(1) + "lambda i, j: x[i, j - P];\n"
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "nn"))
        with open(os.path.join(tmp, "nn", "conv.tdl"), "w") as f:
            f.write("op conv_imported(x) = lambda i: x[i];\n")
        failed = 0
        for name, body in sorted(cases.items()):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(body)
            ops = len(re.findall(r"^\s*op\s", body, flags=re.M))
            r = subprocess.run([tdlc, "--check", path], capture_output=True, text=True)
            status = "OK" if r.returncode == 0 and not r.stderr else "FAIL"
            print("TDL.md %-13s %2d ops  %s" % (name, ops, status))
            if status != "OK":
                failed += 1
                sys.stdout.write(body + r.stderr)
    print("TDL.md examples: %d passed, %d failed" % (len(cases) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
