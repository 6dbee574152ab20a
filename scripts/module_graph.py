#!/usr/bin/env python3
"""Draw the import graph between the top-level modules of src/ and report cycles.

For every top-level module (a `pub mod` in src/lib.rs), list the other top-level modules
its non-test code names through `crate::<module>` (in `use` lines and inline paths).
Test modules (`#[cfg(test)] mod ...` to the end of the file) are left out: they may reach
anywhere. Exits 1 when the graph has a cycle.

Usage: python3 scripts/module_graph.py [--markdown]
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


def uses_in_braces(text, modules):
    """`use crate::{a, b::c}` names a and b."""
    found = set()
    for m in re.finditer(r"\bcrate::\{", text):
        depth, i = 1, m.end()
        start = i
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        inner = text[start : i - 1]
        # top-level items of the group only
        level, item = 0, ""
        for ch in inner + ",":
            if ch == "{":
                level += 1
            elif ch == "}":
                level -= 1
            if ch == "," and level == 0:
                name = re.match(r"\s*(\w+)", item)
                if name and name.group(1) in modules:
                    found.add(name.group(1))
                item = ""
            else:
                item += ch
    return found


def graph():
    modules = top_modules()
    edges = {}
    for mod in modules:
        deps = set()
        for path in files_of(mod):
            text = non_test_text(path)
            for name in re.findall(r"\bcrate::(\w+)", text):
                if name in modules:
                    deps.add(name)
            deps |= uses_in_braces(text, set(modules))
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


def main():
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
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
