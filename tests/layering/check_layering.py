#!/usr/bin/env python3
"""Checks Kestrel's module layering (docs/architecture.md §2) against the code.

The table of modules is declared once, in src/CMakeLists.txt: every `kestrel_module(<name>
PUBLIC ... PRIVATE ...)` names the modules whose headers the module's own headers may include
(PUBLIC) and those only its sources may include (PRIVATE). This check fails when
  - a file of module M includes "<X>/..." for a module X that M may not see: a header sees M's
    PUBLIC modules and, transitively, theirs; a source file also sees M's PRIVATE modules and
    their PUBLIC closure;
  - the modules form a cycle;
  - a module of the engine's request path includes nlohmann/json (JSON is parsed at the edges:
    server/, proxy/, the loaders and the CLI);
  - the table in docs/architecture.md §2 names other dependencies than the build does.

Usage: check_layering.py <repo root>. Prints every violation; exits 1 if there is any.
"""

import re
import sys
from pathlib import Path

# Modules on the request path between the HTTP edge and the kernels: plain structs only.
NO_JSON = {"base", "tensor", "sampling", "backend", "kv", "sched", "runner", "engine"}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


def parse_modules(cmake_text):
    """{name: (public set, private set)} from the kestrel_module(...) calls."""
    modules = {}
    for m in re.finditer(r"kestrel_module\(\s*([a-z_0-9]+)([^)]*)\)", cmake_text):
        name, body = m.group(1), m.group(2)
        words = re.sub(r"#[^\n]*", "", body).split()
        sections = {"PUBLIC": set(), "PRIVATE": set()}
        current = None
        for w in words:
            if w in ("PUBLIC", "PRIVATE", "LIBS", "PRIVATE_LIBS", "SUBDIRS"):
                current = w
            elif current in sections:
                sections[current].add(w)
        modules[name] = (sections["PUBLIC"], sections["PRIVATE"])
    return modules


def public_closure(modules, roots):
    seen, stack = set(), list(roots)
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        stack.extend(modules.get(m, (set(), set()))[0])
    return seen


def find_cycle(modules):
    state = {}

    def visit(m, path):
        state[m] = 1
        pub, priv = modules[m]
        for d in sorted(pub | priv):
            if d not in modules:
                continue
            if state.get(d) == 1:
                return path + [m, d]
            if d not in state:
                cyc = visit(d, path + [m])
                if cyc:
                    return cyc
        state[m] = 2
        return None

    for m in sorted(modules):
        if m not in state:
            cyc = visit(m, [])
            if cyc:
                return cyc
    return None


def parse_doc_table(doc_text):
    """{name: (public set, private set)} from the architecture page's module table."""
    table = {}
    for line in doc_text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"`[a-z_0-9]+/`", cells[0]):
            continue
        name = cells[0].strip("`/")

        def names(cell):
            return set(re.findall(r"[a-z_0-9]+", cell)) - {"none"} if cell not in ("—", "-") else set()

        table[name] = (names(cells[2]), names(cells[3]))
    return table


def main(root):
    root = Path(root)
    src = root / "src"
    modules = parse_modules((src / "CMakeLists.txt").read_text())
    errors = []
    for name, (pub, priv) in modules.items():
        for d in pub | priv:
            if d not in modules:
                errors.append(f"src/CMakeLists.txt: module {name} names unknown module {d}")
    cycle = find_cycle(modules)
    if cycle:
        errors.append("module cycle: " + " -> ".join(cycle))
    known = set(modules)
    for name, (pub, priv) in sorted(modules.items()):
        header_sees = public_closure(modules, pub) | {name}
        source_sees = header_sees | public_closure(modules, priv)
        for path in sorted((src / name).rglob("*")):
            if path.suffix not in (".h", ".cc"):
                continue
            sees = header_sees if path.suffix == ".h" else source_sees
            text = path.read_text(errors="replace")
            for inc in INCLUDE.findall(text):
                rel = path.relative_to(root)
                if inc.startswith("nlohmann/") and name in NO_JSON:
                    errors.append(f"{rel}: includes <{inc}>, but JSON stays out of {name}/")
                top = inc.split("/", 1)[0]
                if "/" not in inc or top not in known:
                    continue
                if top not in sees:
                    kind = "headers" if path.suffix == ".h" else "sources"
                    errors.append(f"{rel}: includes \"{inc}\", but {name}/'s {kind} may not see "
                                  f"{top}/ (src/CMakeLists.txt)")
    doc = parse_doc_table((root / "docs" / "architecture.md").read_text())
    for name in sorted(known | set(doc)):
        if name not in doc:
            errors.append(f"docs/architecture.md: the module table has no row for {name}/")
        elif name not in modules:
            errors.append(f"docs/architecture.md: the module table lists {name}/, the build has none")
        elif doc[name] != modules[name]:
            errors.append(f"docs/architecture.md: {name}/ depends on {sorted(doc[name][0])} "
                          f"(private {sorted(doc[name][1])}) in the table, "
                          f"{sorted(modules[name][0])} (private {sorted(modules[name][1])}) "
                          "in src/CMakeLists.txt")
    for e in errors:
        print(e)
    print(f"{len(modules)} modules, {len(errors)} layering violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]))
