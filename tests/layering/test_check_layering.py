"""The layering check on small made-up trees: it passes a clean one and names each kind of
violation (a module it may not see, another module's internal header, JSON on the request path,
a table that disagrees with the build, a cycle)."""

import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).with_name("check_layering.py")

CMAKE = """
kestrel_module(base)
kestrel_module(kv PUBLIC base)
kestrel_module(model PUBLIC kv)
kestrel_module(engine PUBLIC kv PRIVATE model)
kestrel_module(server PUBLIC engine)
"""

TABLE = """
| folder | owns | depends on | privately uses |
|---|---|---|---|
| `base/` | a | — | — |
| `kv/` | b | base | — |
| `model/` | c | kv | — |
| `engine/` | d | kv | model |
| `server/` | e | engine | — |
"""


def make_tree(root, files, cmake=CMAKE, table=TABLE):
    (root / "src").mkdir()
    (root / "docs").mkdir()
    (root / "src" / "CMakeLists.txt").write_text(cmake)
    (root / "docs" / "architecture.md").write_text(table)
    base = {
        "base/status.h": "",
        "kv/pool.h": '#include "base/status.h"\n',
        "model/causal_lm.h": '#include "kv/pool.h"\n',
        "engine/client.h": '#include "kv/pool.h"\n',
        "engine/executor.h": '#include "model/causal_lm.h"\n',
        "engine/client.cc": '#include "engine/executor.h"\n#include "model/causal_lm.h"\n',
        "server/routes.cc": '#include "engine/client.h"\n#include "base/status.h"\n',
    }
    base.update(files)
    for rel, text in base.items():
        path = root / "src" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def check(root):
    r = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)
    return r.returncode, r.stdout


def test_a_clean_tree_passes(tmp_path):
    make_tree(tmp_path, {})
    rc, out = check(tmp_path)
    assert rc == 0, out
    assert "0 layering violation(s)" in out


def test_a_module_the_table_does_not_allow_fails(tmp_path):
    make_tree(tmp_path, {"kv/pool.cc": '#include "model/causal_lm.h"\n'})
    rc, out = check(tmp_path)
    assert rc == 1
    assert 'src/kv/pool.cc: includes "model/causal_lm.h", but kv/ may not see model/' in out


def test_another_modules_internal_header_fails(tmp_path):
    # engine/executor.h reaches model/, which the engine only uses privately.
    make_tree(tmp_path, {"server/routes.cc": '#include "engine/executor.h"\n'})
    rc, out = check(tmp_path)
    assert rc == 1
    assert "an internal header of engine/ (it reaches model/)" in out
    # Through another engine header too.
    make = tmp_path / "two"
    make.mkdir()
    make_tree(make, {"engine/client.h": '#include "engine/executor.h"\n'})
    rc, out = check(make)
    assert rc == 1
    assert 'src/server/routes.cc: includes "engine/client.h", an internal header of engine/' in out


def test_json_on_the_request_path_fails(tmp_path):
    make_tree(tmp_path, {"engine/client.cc": "#include <nlohmann/json.hpp>\n"})
    rc, out = check(tmp_path)
    assert rc == 1
    assert "JSON stays out of engine/" in out


def test_a_table_that_disagrees_with_the_build_fails(tmp_path):
    make_tree(tmp_path, {}, table=TABLE.replace("| `engine/` | d | kv | model |",
                                                "| `engine/` | d | kv, model | — |"))
    rc, out = check(tmp_path)
    assert rc == 1
    assert "docs/architecture.md: engine/ depends on" in out


def test_a_cycle_fails(tmp_path):
    make_tree(tmp_path, {}, cmake=CMAKE.replace("kestrel_module(base)",
                                                "kestrel_module(base PUBLIC server)"),
              table=TABLE.replace("| `base/` | a | — | — |", "| `base/` | a | server | — |"))
    rc, out = check(tmp_path)
    assert rc == 1
    assert "module cycle:" in out
