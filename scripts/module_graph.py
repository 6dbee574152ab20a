#!/usr/bin/env python3
"""Draw the import graph between the top-level modules of src/ and report cycles.

For every top-level module (a `pub mod` in src/lib.rs), list the other top-level modules
its non-test code names through `crate::<module>` (in `use` lines and inline paths).
Test modules (`#[cfg(test)] mod ...` to the end of the file) are left out: they may reach
anywhere. Exits 1 when the graph has a cycle.

Then the same inside every folder: the files and subfolders of a folder (its mod.rs is the
folder's face and is left out) are the nodes, and a names b when it reaches `super::b`,
`crate::…::folder::b`, or a name the folder's mod.rs re-exports from b (`pub use b::X`, so a
circle cannot hide behind a re-export). A circle inside a folder fails the check too.

Usage: python3 scripts/module_graph.py [--markdown | --self-test]
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def top_modules():
    with open(os.path.join(SRC, "lib.rs")) as f:
        return re.findall(r"^pub mod (\w+);", f.read(), re.M)


def files_of(module):
    single = os.path.join(SRC, module + ".rs")
    if os.path.exists(single):
        yield single
    folder = os.path.join(SRC, module)
    for root, _, names in os.walk(folder):
        for n in names:
            if n.endswith(".rs"):
                yield os.path.join(root, n)


def non_test_text(path):
    text = open(path).read()
    m = re.search(r"^#\[cfg\(test\)\]\s*\n\s*mod \w+\s*\{", text, re.M)
    if m:
        text = text[: m.start()]
    if os.path.basename(path) == "tests.rs":
        return ""
    # Drop comments, so a module named in a doc line is not an edge.
    return re.sub(r"//[^\n]*", "", text)


def graph():
    modules = top_modules()
    edges = {}
    for mod in modules:
        deps = set()
        for path in files_of(mod):
            for p in use_paths(non_test_text(path), module_path(path)):
                if p and p[0] in modules:
                    deps.add(p[0])
        deps.discard(mod)
        edges[mod] = deps
    return modules, edges


def cycles(modules, edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in modules:
        if v not in index:
            visit(v)
    return out


def layers(modules, edges):
    """Depth of each module: 0 uses no other module, n uses something at n-1."""
    depth = {}

    def d(v, seen=()):
        if v in depth:
            return depth[v]
        if v in seen:
            return 0
        depth[v] = 1 + max((d(w, seen + (v,)) for w in edges[v]), default=-1)
        return depth[v]

    for v in modules:
        d(v)
    return depth


def module_path(path):
    """`src/a/b/c.rs` -> ["a", "b", "c"]; `src/a/b/mod.rs` -> ["a", "b"]."""
    parts = os.path.relpath(path, SRC)[: -len(".rs")].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def use_paths(text, here):
    """Every absolute path (a list of segments after `crate`) the text names, `use` trees
    expanded and `super::`/`self::` resolved against the module path `here`."""

    def absolute(segs):
        if not segs:
            return None
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("super", "self"):
            base = list(here)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    if not base:
                        return None
                    base.pop()
                segs = segs[1:]
            return base + segs
        return None

    out = []

    def expand(prefix, tree):
        """`tree` is the text after `prefix::{`, up to its matching brace."""
        level, item = 0, ""
        for ch in tree + ",":
            if ch == "{":
                level += 1
            elif ch == "}":
                level -= 1
            if ch == "," and level == 0:
                item = item.strip()
                m = re.match(r"([\w:]*?)(?:::)?\{(.*)\}$", item, re.S)
                if m:
                    segs = [x for x in m.group(1).split("::") if x]
                    expand(prefix + segs, m.group(2))
                elif item:
                    segs = [x for x in re.split(r"\s+as\s+", item)[0].split("::") if x]
                    if segs and segs != ["self"]:
                        out.append(prefix + segs)
                    elif segs == ["self"]:
                        out.append(prefix)
                item = ""
            else:
                item += ch

    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)*)::\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        root = absolute(m.group(1).split("::"))
        if root is not None:
            before = len(out)
            expand([], text[m.end() : i - 1])
            out[before:] = [root + p for p in out[before:]]
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", text):
        p = absolute(m.group(1).split("::"))
        if p is not None:
            out.append(p)
    return out


def folders():
    """Every folder of src/ with a mod.rs: (module path, folder path)."""
    for root, _, names in os.walk(SRC):
        if "mod.rs" in names:
            yield module_path(os.path.join(root, "mod.rs")), root


def children(folder):
    """The nodes of a folder: its files but mod.rs, and its subfolders (as modules)."""
    out = {}
    for n in sorted(os.listdir(folder)):
        full = os.path.join(folder, n)
        if n.endswith(".rs") and n != "mod.rs":
            out[n[: -len(".rs")]] = [full]
        elif os.path.isdir(full) and os.path.exists(os.path.join(full, "mod.rs")):
            out[n] = [
                os.path.join(r, f) for r, _, fs in os.walk(full) for f in fs if f.endswith(".rs")
            ]
    return out


def reexports(folder, kids):
    """Names mod.rs takes in from a child (`pub use child::{A, B}`, `use child::X`)."""
    text = non_test_text(os.path.join(folder, "mod.rs"))
    here = module_path(os.path.join(folder, "mod.rs"))
    names = {}
    for m in re.finditer(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?use\s+([^;]+);", text, re.M):
        tree = m.group(1).strip()
        if not re.match(r"(crate|super|self)::", tree):
            tree = "self::" + tree
        for p in use_paths(tree, here):
            if len(p) == len(here) + 2 and p[: len(here)] == here and p[len(here)] in kids:
                names.setdefault(p[-1], p[len(here)])
    return names


def inner_graph(here, folder):
    kids = children(folder)
    names = reexports(folder, kids)
    edges = {k: set() for k in kids}
    for kid, paths in kids.items():
        for path in paths:
            for p in use_paths(non_test_text(path), module_path(path)):
                if len(p) <= len(here) or p[: len(here)] != here:
                    continue
                seg = p[len(here)]
                to = seg if seg in kids else names.get(seg)
                if to and to != kid:
                    edges[kid].add(to)
    return sorted(kids), edges


def inner_cycles():
    out = []
    for here, folder in sorted(folders()):
        kids, edges = inner_graph(here, folder)
        for c in cycles(kids, edges):
            out.append((os.path.relpath(folder, os.path.join(SRC, "..")), c, edges))
    return out


def self_test():
    """The in-folder check finds a circle through `super::b`, through a re-export, and
    through a subfolder, and none in a folder whose files only point one way."""
    import tempfile

    global SRC
    cases = {
        "direct": ({"a.rs": "use super::b::X;", "b.rs": "fn f() { super::a::y(); }"}, True),
        "re-export": (
            {"mod.rs": "mod a;\nmod b;\npub use a::Doc;", "a.rs": "use super::b;",
             "b.rs": "use super::Doc;"},
            True,
        ),
        "braces": ({"a.rs": "use super::{b::{X, Y}};", "b.rs": "use crate::m::a::Z;"}, True),
        "subfolder": ({"a.rs": "use super::s::X;", "s/mod.rs": "mod t;", "s/t.rs": "use super::super::a::Y;"}, True),
        "one way": ({"a.rs": "use super::b::X;", "b.rs": "use super::c::Y;", "c.rs": ""}, False),
        "in a test": (
            {"a.rs": "use super::b::X;", "b.rs": "#[cfg(test)]\nmod tests {\nuse super::super::a;\n}"},
            False,
        ),
    }
    failed = 0
    saved = SRC
    for name, (files, circle) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            SRC = root
            folder = os.path.join(root, "m")
            files = dict(files)
            files.setdefault("mod.rs", "")
            for rel, text in files.items():
                path = os.path.join(folder, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text + "\n")
            found = bool(inner_cycles())
            if found != circle:
                failed += 1
                print(f"self-test {name!r}: expected circle={circle}, got {found}", file=sys.stderr)
    SRC = saved
    print("self-test:", "failed" if failed else "ok")
    return 1 if failed else 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    modules, edges = graph()
    found = cycles(modules, edges)
    depth = layers(modules, edges)
    order = sorted(modules, key=lambda m: (depth[m], m))
    if "--markdown" in sys.argv:
        print("| layer | module | uses |")
        print("|---|---|---|")
        for m in order:
            uses = ", ".join(sorted(edges[m], key=lambda x: (depth[x], x))) or "—"
            print(f"| {depth[m]} | `{m}` | {uses} |")
    else:
        for m in order:
            print(f"{depth[m]:>2} {m:<15} -> {', '.join(sorted(edges[m])) or '-'}")
    for c in found:
        print("cycle:", " <-> ".join(c), file=sys.stderr)
    inner = inner_cycles()
    for folder, c, e in inner:
        ties = "; ".join(f"{a} -> {', '.join(sorted(e[a] & set(c)))}" for a in c)
        print(f"cycle in {folder}/: {' <-> '.join(c)} ({ties})", file=sys.stderr)
    return 1 if found or inner else 0


if __name__ == "__main__":
    sys.exit(main())
