#!/usr/bin/env python3
"""The code's layout rules, checked (Python 3 standard library only; run
from the repository root, scripts/test.sh runs it after `cargo fmt`):

1. No import circle across folders. For every crate (crates/*/src) the file-level
   dependency graph is read from paths that start with `crate::`,
   `super::`, `self::` or the name of a child module of the file's module
   (in `use` declarations and inline in code; comments and string literals
   ignored), each resolved to the longest module path that is a file
   (`lib.rs`, `main.rs` and `mod.rs` are their directory's module; `foo.rs`
   is module `foo`). A cycle of files (a strongly connected set) whose
   files lie in more than one folder fails, listed with the file edges that
   cross folders (a file's folder is its directory; `lib.rs`, `main.rs`,
   `mod.rs` and a `foo.rs` beside a `foo/` directory stand for the
   directory they head). Cycles inside one folder (an owner's `impl` blocks
   in its phase files and the `mod.rs` that declares them) are allowed;
   `--files` lists them.
2. No .rs file under crates/ over 800 lines.
3. No function body (its braces' lines) over 120 lines outside test code
   and data tables (a `// check-layout: table` comment among the five lines
   above the `fn`).

Test code is left out of 1 and 3: files named tests.rs or tests_*.rs,
files under a tests/ directory, modules declared under `#[cfg(test)]`, and
every item marked `#[cfg(test)]`.

Exit status 1 with the findings, else a one-line summary.
"""

import argparse
import os
import re
import sys
from collections import defaultdict

MAX_FILE_LINES = 800
MAX_FN_LINES = 120

RAW_STR = re.compile(r'(?:b|c)?r(#*)"')


def strip(src):
    """`src` with comments and the insides of string and char literals
    blanked (spaces; newlines kept, so offsets and line numbers hold)."""
    out = list(src)
    n = len(src)

    def blank(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    def ident_before(i):
        return i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")

    i = 0
    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
            continue
        if c == "/" and src.startswith("/*", i):
            depth, j = 0, i
            while j < n:
                if src.startswith("/*", j):
                    depth += 1
                    j += 2
                elif src.startswith("*/", j):
                    depth -= 1
                    j += 2
                    if depth == 0:
                        break
                else:
                    j += 1
            blank(i, j)
            i = j
            continue
        if c in "bcr" and not ident_before(i):
            m = RAW_STR.match(src, i)
            if m:
                end = '"' + m.group(1)
                j = src.find(end, m.end())
                j = n if j < 0 else j
                blank(m.end(), j)
                i = j + len(end)
                continue
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
            continue
        if c == "'":
            if i + 1 < n and src[i + 1] == "\\":
                j = src.find("'", i + 3)
                j = n if j < 0 else j
                blank(i + 1, j)
                i = j + 1
                continue
            if i + 2 < n and src[i + 2] == "'" and src[i + 1] != "'":
                blank(i + 1, i + 2)
                i += 3
                continue
        i += 1
    return "".join(out)


def match_close(text, at):
    """The offset of the bracket closing the one at `at` (stripped text:
    brackets balance); len(text) when none does."""
    depth = 0
    for k in range(at, len(text)):
        ch = text[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return k
    return len(text)


def item_end(text, j):
    """The end of the item starting at `j`: after its `;` or its block."""
    depth = 0
    k = j
    while k < len(text):
        ch = text[k]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch == ";":
            return k + 1
        elif depth == 0 and ch == "{":
            return match_close(text, k) + 1
        k += 1
    return len(text)


CFG_TEST = re.compile(r"#\[cfg\(test\)\]")
ATTR = re.compile(r"\s*#\[")
MOD_DECL = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")


def drop_tests(text):
    """`text` (stripped) with every `#[cfg(test)]` item blanked; the names
    of the modules declared (`mod x;`) under it."""
    spans, test_mods = [], set()
    for m in CFG_TEST.finditer(text):
        if spans and m.start() < spans[-1][1]:
            continue
        j = m.end()
        while True:
            a = ATTR.match(text, j)
            if not a:
                break
            j = match_close(text, a.end() - 1) + 1
        end = item_end(text, j)
        d = MOD_DECL.match(text, j + len(text[j:]) - len(text[j:].lstrip()))
        if d and d.group(2) == ";":
            test_mods.add(d.group(1))
        spans.append((m.start(), end))
    out = list(text)
    for a, b in spans:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out), test_mods


def is_test_path(rel):
    parts = rel.split("/")
    name = parts[-1]
    return name == "tests.rs" or name.startswith("tests_") or "tests" in parts[:-1]


class Crate:
    def __init__(self, src):
        self.src = src  # crates/x/src
        self.files = {}  # rel path -> stripped text (tests dropped)
        self.raw_lines = {}
        self.test = set()
        self.modpath = {}  # rel -> tuple
        self.root_of = {}  # rel -> root rel
        self.index = defaultdict(dict)  # root -> modpath -> rel
        self.test_decl = {}  # rel -> names of cfg(test) modules it declares
        for d, _, fs in os.walk(src):
            for f in fs:
                if f.endswith(".rs"):
                    p = os.path.join(d, f)
                    rel = os.path.relpath(p, src).replace(os.sep, "/")
                    with open(p, encoding="utf-8") as fh:
                        text = fh.read()
                    stripped = strip(text)
                    if "#![cfg(test)]" in stripped:
                        self.test.add(rel)
                    body, tmods = drop_tests(stripped)
                    self.files[rel] = body
                    self.test_decl[rel] = tmods
                    if is_test_path(rel):
                        self.test.add(rel)
        self.walk()

    def mod_dir(self, rel):
        """The directory a file's child modules live in."""
        d, f = os.path.split(rel)
        if f in ("lib.rs", "main.rs", "mod.rs"):
            return d
        return os.path.join(d, f[:-3]).replace(os.sep, "/")

    def inline_mods(self, rel):
        """Inline (non-test) `mod x { … }` spans of a file: (start, end, name)."""
        text = self.files[rel]
        spans = []
        for m in MOD_DECL.finditer(text):
            if m.group(2) == "{":
                spans.append((m.end() - 1, match_close(text, m.end() - 1), m.group(1)))
        return spans

    def inline_at(self, rel, pos, spans):
        return [name for a, b, name in spans if a < pos < b]

    def walk(self):
        roots = [r for r in ("lib.rs", "main.rs") if r in self.files]
        roots += sorted(r for r in self.files if r.startswith("bin/") and r.count("/") == 1)
        for root in roots:
            todo = [(root, ())]
            while todo:
                rel, mp = todo.pop()
                if rel in self.root_of:
                    continue
                self.root_of[rel] = root
                self.modpath[rel] = mp
                self.index[root][mp] = rel
                text = self.files[rel]
                spans = self.inline_mods(rel)
                base = self.mod_dir(rel)
                for m in MOD_DECL.finditer(text):
                    if m.group(2) != ";":
                        continue
                    inner = self.inline_at(rel, m.start(), spans)
                    d = "/".join([x for x in [base] + inner if x])
                    for cand in (f"{d}/{m.group(1)}.rs", f"{d}/{m.group(1)}/mod.rs"):
                        cand = cand.lstrip("/")
                        if cand in self.files:
                            todo.append((cand, mp + tuple(inner) + (m.group(1),)))
                            break
                # modules declared under #[cfg(test)] and all below them
                for name in self.test_decl[rel]:
                    for cand in (f"{base}/{name}.rs".lstrip("/"), f"{base}/{name}/mod.rs".lstrip("/")):
                        if cand in self.files:
                            self.mark_test_tree(cand)
        # Files no root declares: placed by location under the first root.
        lib = roots[0] if roots else None
        for rel in self.files:
            if rel not in self.root_of and lib:
                parts = rel[:-3].split("/")
                if parts[-1] == "mod":
                    parts = parts[:-1]
                self.root_of[rel] = lib
                self.modpath[rel] = tuple(parts)
                self.index[lib].setdefault(tuple(parts), rel)

    def mark_test_tree(self, rel):
        self.test.add(rel)
        d = self.mod_dir(rel)
        for other in self.files:
            if d and other.startswith(d + "/"):
                self.test.add(other)

    def folder(self, rel):
        d, f = os.path.split(rel)
        if f in ("lib.rs", "main.rs", "mod.rs"):
            return d
        sub = os.path.join(d, f[:-3])
        if os.path.isdir(os.path.join(self.src, sub)):
            return sub.replace(os.sep, "/")
        return d


USE = re.compile(r"\buse\s+([^;]*);")
TOKEN = re.compile(r"::|[{},*]|\w+")


def expand_use(tree):
    """`a::{b, c::{d, e as f}, *}` into paths ([a, b], [a, c, d], …)."""
    toks = TOKEN.findall(tree)
    pos = 0

    def parse(prefix):
        nonlocal pos
        paths = []
        if pos < len(toks) and toks[pos] == "{":
            pos += 1
            while pos < len(toks) and toks[pos] != "}":
                if toks[pos] == ",":
                    pos += 1
                    continue
                paths += parse(prefix)
            pos += 1
            return paths
        path = list(prefix)
        if pos < len(toks) and toks[pos] == "::":
            pos += 1
        while pos < len(toks):
            t = toks[pos]
            if t == "*":
                pos += 1
                break
            if t == "{":
                return parse(path)
            if t in (",", "}"):
                break
            if t == "::":
                pos += 1
                continue
            if t == "as":
                pos += 2
                break
            path.append(t)
            pos += 1
        if path and path[-1] == "self":
            path = path[:-1]
        return [path] if path else []

    out = []
    while pos < len(toks):
        before = pos
        out += parse([])
        if pos == before:
            pos += 1
    return out


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def dependencies(crate):
    """File edges: {(from, to): [(line, path text), …]}."""
    edges = defaultdict(list)
    for rel, text in crate.files.items():
        if rel in crate.test or rel not in crate.root_of:
            continue
        root = crate.root_of[rel]
        index = crate.index[root]
        here = crate.modpath[rel]
        spans = crate.inline_mods(rel)

        def resolve(segs, pos):
            mp = list(here) + crate.inline_at(rel, pos, spans)
            first = segs[0]
            if first == "crate":
                full = segs[1:]
            elif first in ("super", "self"):
                base, rest = list(mp), list(segs)
                while rest and rest[0] in ("super", "self"):
                    if rest[0] == "super":
                        if not base:
                            return None
                        base.pop()
                    rest = rest[1:]
                full = base + rest
            elif tuple(mp + [first]) in index:
                full = mp + segs
            else:
                return None
            for k in range(len(full), -1, -1):
                target = index.get(tuple(full[:k]))
                if target:
                    return target
            return None

        def note(segs, pos, shown):
            target = resolve(segs, pos)
            if target and target != rel:
                edges[(rel, target)].append((line_of(text, pos), shown))

        body = list(text)
        for m in USE.finditer(text):
            for segs in expand_use(m.group(1)):
                note(segs, m.start(), "::".join(segs))
            for k in range(m.start(), m.end()):
                if body[k] != "\n":
                    body[k] = " "
        body = "".join(body)
        children = sorted(
            mp[-1] for mp in index if len(mp) == len(here) + 1 and mp[: len(here)] == here
        )
        heads = ["crate", "super", "self"] + children
        inline = re.compile(
            r"(?<![\w$:.#])(" + "|".join(map(re.escape, heads)) + r")((?:\s*::\s*\w+)+)"
        )
        for m in inline.finditer(body):
            segs = [m.group(1)] + [s.strip() for s in m.group(2).split("::") if s.strip()]
            note(segs, m.start(), "::".join(segs))
    return edges


def sccs(nodes, adj):
    """Strongly connected components (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for v in nodes:
        if v in index:
            continue
        work = [(v, iter(sorted(adj.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return out


def shortest_cycle(start, adj, within):
    """The shortest cycle through `start` inside `within`."""
    prev = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(adj.get(v, ())):
                if w not in within:
                    continue
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def show_folder(f):
    return (f + "/") if f else "(src root)"


def check_cycles(crate, name, files_too):
    """A cycle of files that lie in more than one folder fails; cycles
    within one folder are listed with --files only."""
    problems, info = [], []
    edges = dependencies(crate)
    adj = defaultdict(set)
    for a, b in edges:
        adj[a].add(b)
    nodes = sorted(set(adj) | {w for s in adj.values() for w in s})
    for comp in sccs(nodes, adj):
        if len(comp) < 2:
            continue
        folders = sorted({crate.folder(f) for f in comp})
        cyc = shortest_cycle(comp[0], adj, set(comp))
        if len(folders) < 2:
            if files_too:
                info.append(f"{name}: file cycle inside {show_folder(folders[0])}: " + " -> ".join(cyc))
            continue
        lines = [
            f"{name}: import circle across folders ({', '.join(show_folder(f) for f in folders)}): "
            + " -> ".join(cyc)
        ]
        for x in comp:
            for y in sorted(adj[x]):
                if y in comp and crate.folder(x) != crate.folder(y):
                    line, path = edges[(x, y)][0]
                    lines.append(f"      {crate.src}/{x}:{line} -> {y} ({path})")
        problems.append("\n".join(lines))
    return problems, info


FN = re.compile(r"\bfn\s+(\w+)")
IMPL = re.compile(r"\b(impl|trait)\b")


def owners(text):
    """impl/trait blocks: (open, close, type name)."""
    out = []
    for m in IMPL.finditer(text):
        k = m.end()
        depth = 0
        while k < len(text):
            ch = text[k]
            if ch == "<":
                depth += 1
            elif ch == ">" and text[k - 1] != "-":
                depth -= 1
            elif ch in ";(" and depth == 0 and m.group(1) == "impl":
                break
            elif ch == "{" and depth <= 0:
                break
            k += 1
        if k >= len(text) or text[k] != "{":
            continue
        header = text[m.end() : k]
        if m.group(1) == "impl":
            h = header.strip()
            if h.startswith("<"):
                d = 0
                for i, ch in enumerate(h):
                    d += ch == "<"
                    d -= ch == ">"
                    if d == 0:
                        h = h[i + 1 :]
                        break
            h = re.split(r"\bfor\b", h)[-1]
            h = re.split(r"\bwhere\b", h)[0]
            h = re.sub(r"<.*", "", h, flags=re.S).strip()
            tname = re.findall(r"\w+", h)
            tname = tname[-1] if tname else "?"
        else:
            found = re.match(r"\s*(\w+)", header)
            tname = found.group(1) if found else "?"
        out.append((k, match_close(text, k), tname))
    return out


TABLE_MARK = "check-layout: table"


def is_table(crate, rel, line):
    """A data table (rows of a spec, one per metric or schema) is marked by
    a comment `// check-layout: table` among the five lines above its `fn`;
    it may run past the limit."""
    with open(os.path.join(crate.src, rel), encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    return any(TABLE_MARK in x for x in lines[max(0, line - 6) : line - 1])


def long_fns(crate, name):
    problems = []
    for rel, text in sorted(crate.files.items()):
        if rel in crate.test:
            continue
        blocks = owners(text)
        for m in FN.finditer(text):
            k, depth = m.end(), 0
            while k < len(text):
                ch = text[k]
                if ch in "([":
                    depth += 1
                elif ch in ")]":
                    depth -= 1
                elif depth == 0 and ch in ";{":
                    break
                k += 1
            if k >= len(text) or text[k] != "{":
                continue
            close = match_close(text, k)
            length = line_of(text, close) - line_of(text, k) + 1
            if length > MAX_FN_LINES and not is_table(crate, rel, line_of(text, m.start())):
                inside = [b for b in blocks if b[0] < m.start() < b[1]]
                owner = (max(inside, key=lambda b: b[0])[2] + "::") if inside else ""
                problems.append(
                    f"{crate.src}/{rel}:{line_of(text, m.start())}: fn {owner}{m.group(1)} is {length} lines (max {MAX_FN_LINES})"
                )
    return problems


def long_files(top):
    problems = []
    for d, dirs, fs in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x != "target")
        for f in sorted(fs):
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                with open(p, encoding="utf-8") as fh:
                    n = sum(1 for _ in fh)
                if n > MAX_FILE_LINES:
                    problems.append(f"{p}: {n} lines (max {MAX_FILE_LINES})")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", action="store_true", help="also list the cycles between files (informational)")
    args = ap.parse_args()
    if not os.path.isdir("crates"):
        sys.exit("check-layout: run from the repository root")
    problems, info = [], []
    ncrates = nfiles = 0
    for c in sorted(os.listdir("crates")):
        src = os.path.join("crates", c, "src")
        if not os.path.isdir(src):
            continue
        crate = Crate(src)
        ncrates += 1
        nfiles += len(crate.files)
        p, i = check_cycles(crate, f"crates/{c}", args.files)
        problems += p
        info += i
        problems += long_fns(crate, f"crates/{c}")
    problems += long_files("crates")
    for line in info:
        print(line)
    if problems:
        for p in problems:
            print(p)
        print(f"check-layout: {len(problems)} problem(s) in {ncrates} crates, {nfiles} source files", file=sys.stderr)
        sys.exit(1)
    print(
        f"check-layout: ok: {ncrates} crates, {nfiles} source files: no import circle across folders, "
        f"no file over {MAX_FILE_LINES} lines, no fn over {MAX_FN_LINES} lines"
    )


if __name__ == "__main__":
    main()
