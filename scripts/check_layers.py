#!/usr/bin/env python3
"""Checks that the C core's #include lines follow DESIGN.md's layers.

    python3 scripts/check_layers.py [--root DIR]

Layers, bottom to top (a file may include its own layer and those below):

    base (+ core/include/torchtpu_types.h)  <  pjrt, hlo, kernels  <  lower
    <  runtime  <  the public API (core/include/torchtpu.h)

- pjrt/, hlo/ and kernels/ (our own device kernels, e.g. the CPU plugin's
  attention) are peers: none includes another.
- torchtpu.h is the runtime's public face: only runtime/ (which implements it)
  and the shim include it. The shim includes nothing else of the core.
- A private header (`internal.h`, `*_internal.h`) is included only from its
  own folder.
- The executors (runtime/strict, fused, graph) reach each other and the
  storages only through runtime/executor.h: an executor's header is included
  by its own .c file and by runtime/runtime.c (the context, which creates
  them), nobody else.

Prints every offending include with its file and line and exits 1; exits 0
when the tree is clean.
"""
import argparse
import os
import re
import sys

RANKS = {"base": 0, "pjrt": 1, "hlo": 1, "kernels": 1, "lower": 2, "runtime": 3}
EXECUTORS = {"runtime/strict.h", "runtime/fused.h", "runtime/graph.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of_header(path):
    """(layer, rank) of an include path as written ("lower/ctx.h")."""
    if path == "torchtpu_types.h":
        return "base", 0
    if path == "torchtpu.h":
        return "api", 4
    top = path.split("/", 1)[0]
    if top in RANKS and "/" in path:
        return top, RANKS[top]
    return None, None


def is_private(path):
    name = os.path.basename(path)
    return name == "internal.h" or name.endswith("_internal.h")


def check_core_file(rel, inc):
    """Problems with `#include "inc"` in core file `rel` (relative to core/)."""
    parts = rel.split("/")
    if parts[0] == "include":
        src_layer, src_rank = layer_of_header(parts[1])
    else:  # src/<layer>/...
        src_layer = parts[1]
        src_rank = RANKS.get(src_layer)
    if src_rank is None:
        return [f"{rel} is in no known layer"]
    if inc in ("op_helpers.h", "check.h"):
        return []
    layer, rank = layer_of_header(inc)
    if layer is None:
        return [f"includes {inc}, which is in no layer (write it as <layer>/<file>.h)"]
    out = []
    if layer == "api":
        if src_layer != "runtime":
            out.append(f"{src_layer} includes the public API header {inc}: only the "
                       "runtime (its implementation) may; lower layers use "
                       "torchtpu_types.h")
        return out
    if rank > src_rank:
        out.append(f"{src_layer} (rank {src_rank}) includes {inc} from the layer "
                   f"above it, {layer} (rank {rank})")
    elif rank == src_rank and layer != src_layer:
        out.append(f"{src_layer} includes {inc} from its peer layer {layer}")
    if is_private(inc) and os.path.dirname(inc) != src_layer:
        out.append(f"includes {inc}, a private header of {os.path.dirname(inc)}/")
    if inc in EXECUTORS:
        own = inc[:-2] + ".c"
        here = "/".join(parts[1:])
        if here not in (own, "runtime/runtime.c"):
            out.append(f"includes {inc}, an executor's own header: executors and "
                       "storages reach each other only through runtime/executor.h")
    return out


def scan(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, line.rstrip("\n"), m.group(1)


def check(root):
    problems = []
    core = os.path.join(root, "core")
    for sub in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(core, sub)):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, core).replace(os.sep, "/")
                for lineno, text, inc in scan(path):
                    for why in check_core_file(rel, inc):
                        problems.append(f"core/{rel}:{lineno}: {text.strip()}  -- {why}")
    shim = os.path.join(root, "shim")
    if os.path.isdir(shim):
        for name in sorted(os.listdir(shim)):
            if not name.endswith((".cpp", ".h")):
                continue
            path = os.path.join(shim, name)
            for lineno, text, inc in scan(path):
                if inc == "torchtpu.h" or os.path.exists(os.path.join(shim, inc)):
                    continue
                problems.append(f"shim/{name}:{lineno}: {text.strip()}  -- the shim "
                                "includes only the public header torchtpu.h of the core")
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                   help="the repository to check (default: this one)")
    args = p.parse_args()
    problems = check(os.path.abspath(args.root))
    for line in problems:
        print(line)
    if problems:
        print(f"layering check: {len(problems)} offending include(s)")
        return 1
    print("layering check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
