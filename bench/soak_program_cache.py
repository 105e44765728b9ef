"""Soak (not a test): 300 distinct shapes through a few eager ops, printing
RSS, memory mappings and the program cache's entries every 50 shapes, in a
fresh process per setting: unbounded, and bounded by
TORCHTPU_PROGRAM_CACHE_MAX_BYTES (when the core supports the bound).

    python bench/soak_program_cache.py [--shapes 300] [--bound 64M]
"""
import argparse
import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import json, sys, time, torch, torchtpu
    n = int(sys.argv[1])
    def rss_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    def maps():
        return sum(1 for _ in open("/proc/self/maps"))
    rows, t0 = [], time.perf_counter()
    for i in range(1, n + 1):
        x = torch.randn(i, 7, device="tpu")
        y = (x.exp() * 2 + x.sin()).sum(0)
        y.cpu()
        if i % 50 == 0 or i == n:
            st = torch.tpu._get_cache_stats()
            rows.append({"shapes": i, "rss_mb": round(rss_mb(), 1), "maps": maps(),
                         "programs": st["live_programs"], "compiles": st["compiles"],
                         "evicted": st["program_cache_evictions"],
                         "seconds": round(time.perf_counter() - t0, 1)})
    print("RESULT " + json.dumps(rows))
""")


def run(shapes, env):
    p = subprocess.run([sys.executable, "-c", CHILD, str(shapes)], env=env, text=True,
                       capture_output=True, timeout=3600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(lines[-1][7:]), p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", type=int, default=300)
    ap.add_argument("--bound", default="64M")
    ap.add_argument("--only-bounded", action="store_true", help="skip the unbounded run")
    args = ap.parse_args()
    base = dict(os.environ, TORCHTPU_CACHE_DIR="off")
    base.pop("TORCHTPU_PROGRAM_CACHE_MAX_BYTES", None)
    runs = [("unbounded", base)] if not args.only_bounded else []
    runs.append((f"bound {args.bound}", dict(base, TORCHTPU_PROGRAM_CACHE_MAX_BYTES=args.bound)))
    for label, env in runs:
        rows, err = run(args.shapes, env)
        note = " (bound not supported by this core: ignored)" if "ignored" in err else ""
        print(f"{label}{note}")
        print(f"  {'shapes':>6} {'RSS MB':>8} {'maps':>6} {'programs':>8} {'evicted':>8} "
              f"{'compiles':>8} {'s':>6}")
        for r in rows:
            print(f"  {r['shapes']:>6} {r['rss_mb']:>8} {r['maps']:>6} {r['programs']:>8} "
                  f"{r['evicted']:>8} {r['compiles']:>8} {r['seconds']:>6}")


if __name__ == "__main__":
    main()
