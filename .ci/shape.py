#!/usr/bin/env python3
"""The crates' shape, as docs/architecture.md states it: no file under src/, crates/ or tests/
over 600 lines (a file under src/ or crates/ counting the tests it pulls in, `mod tests;`
with or without `#[path]`; a file under tests/ counted alone), no function over 100 lines,
no `Result<_, String>`. Prints what breaks a rule and exits 1 if anything does. Before a
file or a function reaches its cap it prints a warning (at 500 lines, at 80-line functions)
and still exits 0: the room left to split by concept rather than in a hurry.
`.ci/run` runs it; by hand, from the crate root: `python3 .ci/shape.py`."""
import os
import re
import sys

MAX_FILE_LINES = 600
MAX_FN_LINES = 100
WARN_FILE_LINES = 500
WARN_FN_LINES = 80


def lines(path):
    with open(path) as f:
        return f.read().splitlines()


def rust_files(roots):
    for root in roots:
        for d, _, names in os.walk(root):
            if "/target" in d:
                continue
            for n in names:
                if n.endswith(".rs"):
                    yield os.path.join(d, n)


def test_files(path, src):
    """The files `path` pulls in as its tests (`#[cfg(test)] mod NAME;`)."""
    out = []
    for i, l in enumerate(src):
        m = re.match(r"\s*mod (\w+);", l)
        if not m:
            continue
        attrs = " ".join(src[max(0, i - 2):i])
        if "cfg(test)" not in attrs and "test" not in m.group(1):
            continue
        p = re.search(r'#\[path = "([^"]+)"\]', attrs)
        base, stem = os.path.dirname(path), os.path.basename(path)[:-3]
        if p:
            t = os.path.join(base, p.group(1))
        elif stem in ("mod", "lib", "main"):
            t = os.path.join(base, m.group(1) + ".rs")
        else:
            t = os.path.join(base, stem, m.group(1) + ".rs")
        if os.path.exists(t):
            out.append(t)
    return out


FN = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def long_functions(path, src):
    for i, l in enumerate(src):
        m = FN.match(l)
        if not m:
            continue
        indent, j = m.group(1), i
        # The signature ends at its body's `{`, at `;` (no body) or at `}` (a body on one line).
        while j < len(src) and not src[j].rstrip().endswith(("{", ";", "}")):
            j += 1
        if j >= len(src) or not src[j].rstrip().endswith("{"):
            continue
        k = j + 1
        while k < len(src) and src[k] != indent + "}":
            k += 1
        if k - i + 1 > WARN_FN_LINES:
            yield i + 1, m.group(7), k - i + 1


def string_errors(l):
    """Whether `l` names a `Result<_, String>` (two arguments, the second `String`)."""
    for m in re.finditer(r"Result<", l):
        depth, k, last = 1, m.end(), m.end()
        while k < len(l) and depth:
            c = l[k]
            if c in "<(":
                depth += 1
            elif c in ">)":
                depth -= 1
            elif c == "," and depth == 1:
                last = k + 1
            k += 1
        if depth == 0 and last != m.end() and l[last:k - 1].strip() == "String":
            return True
    return False


def main():
    bad, warned = [], []
    files = sorted(rust_files(("src", "crates")))
    pulled = {t for p in files for t in test_files(p, lines(p))}
    # A file under tests/ is its own unit: nothing there is pulled in as `mod tests;`.
    checked = [(p, test_files(p, lines(p))) for p in files if p not in pulled]
    checked += [(p, []) for p in sorted(rust_files(("tests",)))]
    for p, tests in checked:
        src = lines(p)
        total = len(src) + sum(len(lines(t)) for t in tests)
        with_tests = f" with {', '.join(tests)}" if tests else ""
        if total > MAX_FILE_LINES:
            bad.append(f"{p}: {total} lines{with_tests}")
        elif total > WARN_FILE_LINES:
            warned.append(f"{p}: {total} lines{with_tests} (cap {MAX_FILE_LINES})")
        for line, name, n in long_functions(p, src):
            if n > MAX_FN_LINES:
                bad.append(f"{p}:{line}: fn {name} is {n} lines")
            else:
                warned.append(f"{p}:{line}: fn {name} is {n} lines (cap {MAX_FN_LINES})")
        for i, l in enumerate(src):
            if string_errors(l):
                bad.append(f"{p}:{i + 1}: Result<_, String>: {l.strip()}")
    for w in warned:
        print(f"warning: {w}")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
