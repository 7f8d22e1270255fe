#!/usr/bin/env python3
"""Checks Kestrel's module layering (docs/architecture.md §2) against the code.

The table of modules is declared once, in src/CMakeLists.txt: every `kestrel_module(<name>
PUBLIC ... PRIVATE ...)` names the modules M's users see through it (PUBLIC) and those only M
itself uses (PRIVATE). M sees its own folder, its PUBLIC and PRIVATE modules and, transitively,
their PUBLIC modules. A header of M that reaches (through M's own headers) a module outside M's
PUBLIC closure is M's internal header. This check fails when
  - a file of module M includes "<X>/..." for a module X that M does not see;
  - a file of another module includes an internal header of M (e.g. the server including an
    engine header that pulls in the model runner);
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
    files = {}  # module -> {path relative to src: (includes of modules, text)}
    for name in modules:
        for path in sorted((src / name).rglob("*")):
            if path.suffix in (".h", ".cc"):
                files.setdefault(name, {})[path.relative_to(src).as_posix()] = INCLUDE.findall(
                    path.read_text(errors="replace"))
    # Internal headers: those whose in-module include closure reaches past the PUBLIC closure.
    internal = {}
    for name, (pub, priv) in modules.items():
        outward = public_closure(modules, pub) | {name}
        own = files.get(name, {})
        reach = {}

        def reaches(h, seen=None):
            if h in reach:
                return reach[h]
            seen = seen or set()
            seen.add(h)
            out = set()
            for inc in own.get(h, []):
                top = inc.split("/", 1)[0]
                if top == name and inc in own and inc.endswith(".h"):
                    if inc not in seen:
                        out |= reaches(inc, seen)
                elif top in known and top != name:
                    out.add(top)
            reach[h] = out
            return out

        for h in own:
            if h.endswith(".h") and not reaches(h) <= outward:
                internal[h] = sorted(reaches(h) - outward)
    for name, (pub, priv) in sorted(modules.items()):
        sees = public_closure(modules, pub | priv) | {name}
        for rel, includes in sorted(files.get(name, {}).items()):
            for inc in includes:
                where = f"src/{rel}"
                if inc.startswith("nlohmann/") and name in NO_JSON:
                    errors.append(f"{where}: includes <{inc}>, but JSON stays out of {name}/")
                top = inc.split("/", 1)[0]
                if "/" not in inc or top not in known:
                    continue
                if top not in sees:
                    errors.append(f"{where}: includes \"{inc}\", but {name}/ may not see {top}/ "
                                  "(src/CMakeLists.txt)")
                elif top != name and inc in internal:
                    errors.append(f"{where}: includes \"{inc}\", an internal header of {top}/ "
                                  f"(it reaches {', '.join(internal[inc])}/)")
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
