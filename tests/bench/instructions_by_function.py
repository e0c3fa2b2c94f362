"""Instructions per request over HTTP by Python function: instructions_http.py, one layer each.

    python tests/bench/instructions_by_function.py [--functions 260] [--top 80]
        [--server-root TREE] [--keep DIR]

The same served process, requests and dumps as ``instructions_http.py`` (``this`` server only,
records to a file), but its layer hook classes every Python function as a layer of its own: a
function's line is its own instructions per request, C code it calls included, its Python
callees not. Functions are numbered as they first run after the 30th request reaches the
endpoint (start-up's are not numbered, and count where they are called from), up to
``--functions`` (more: the last line). The hook's cost per call weighs on every line (small
functions most): read it for where the work is, not for totals. About 5 min (gcc builds
--functions squared pair functions).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import instructions_http as layered  # noqa: E402

BOOT = """
import os, runpy, sys
N = @N@
MAP = os.path.join(os.getcwd(), "functions-%d.tsv" % os.getpid())
state = {"active": False, "calls": 0, "next": 1, "keys": {}}
def classify(code):
    if not state["active"]:
        if code.co_qualname == "McpEndpoint.__call__":
            state["calls"] += 1
            state["active"] = state["calls"] >= 30
        if not state["active"]:
            return -3  # asked again on its next call
    key = (code.co_filename, code.co_qualname, code.co_firstlineno)
    index = state["keys"].get(key)
    if index is None:
        index = state["keys"][key] = min(state["next"], N - 1)
        state["next"] += 1
        with open(MAP, "a") as out:
            out.write("%d\\t%s:%d %s\\n" % (index, key[0], key[2], key[1]))
    return index
kind, target = sys.argv[1], sys.argv[2]
if os.environ.get("MCP_BENCH_LAYERS") == "1":
    import _mcplayers
    _mcplayers.install(classify)
from server.transport.disconnect import DisconnectWatch
DisconnectWatch.WATCH_AFTER_S *= 50
sys.argv = sys.argv[2:]
runpy.run_module(target, run_name="__main__", alter_sys=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions", type=int, default=260)
    parser.add_argument("--top", type=int, default=80)
    parser.add_argument("--server-root", type=Path, default=layered.ROOT)
    parser.add_argument("--keep", type=Path, help="keep the callgrind files in this folder")
    ours = parser.parse_args()
    n = ours.functions
    layered.LAYERS = [("rest", "")] + [(f"f{i}", "") for i in range(1, n)]
    # build_hook formats BOOT with the layer rules, which this one does not need.
    layered.BOOT = BOOT.replace("@N@", str(n)).replace("{", "{{").replace("}", "}}")
    work = ours.keep or Path(tempfile.mkdtemp(prefix="instructions-by-function-"))
    work.mkdir(parents=True, exist_ok=True)
    args = argparse.Namespace(
        n1=50,
        n2=250,
        warmup=50,
        no_layers=False,
        plain=False,
        records="file",
        server_root=ours.server_root.resolve(),
        sync_on_loop=False,
    )
    layered.build_hook(work, args.server_root)
    (work / "bench_catalog.py").write_text(layered.bench_catalog_source())
    numbers, _ = layered.run_server("this", args, work, {})
    names = {0: "(outside any function numbered: the loop, start-up's callers)"}
    names[n - 1] = f"(functions past the first {n - 2})"
    for table in work.glob("functions-*.tsv"):
        for line in table.read_text().splitlines():
            index, name = line.split("\t", 1)
            names.setdefault(int(index), name.replace(str(args.server_root) + "/", ""))
    for kind in ("async", "sync"):
        total, own = numbers[(kind, True)][0][0], numbers[(kind, True)][1]
        print(f"\nthis: modern tools/call, {kind} tool: {total:,} instructions per request")
        ranked = sorted(enumerate(own), key=lambda pair: -pair[1])
        for index, value in ranked[: ours.top]:
            print(f"{value:>9,}  {names.get(index, f'#{index}')}")
    print(f"\nfiles in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
