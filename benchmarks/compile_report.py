"""Sum a cold test run's compilations (``tests/compile_log.py``'s JSON lines).

Run the tests with ``LBN_COMPILE_LOG=DIR``, then ``python benchmarks/compile_report.py DIR``:
seconds per kind (Numba, C), per kernel (summed over signatures), per test file,
and the compilations made in more than one worker (what a shared cache would save).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def _kernel(what: str) -> str:
    return what.split("(", 1)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--min-seconds", type=float, default=0.5, help="below this: a cache load")
    args = parser.parse_args(argv)
    records = []
    for path in sorted(args.directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            rec["worker"] = path.stem
            records.append(rec)
    compiled = [r for r in records if r["seconds"] >= args.min_seconds]
    by_kind, by_kernel, by_file = (collections.Counter() for _ in range(3))
    signatures = collections.Counter()
    workers = collections.defaultdict(set)
    for r in compiled:
        by_kind[r["kind"]] += r["seconds"]
        by_kernel[f"{r['kind']} {_kernel(r['what'])}"] += r["seconds"]
        signatures[f"{r['kind']} {_kernel(r['what'])}"] += 1
        by_file[r["test"].split("::")[0]] += r["seconds"]
        workers[(r["kind"], r["what"])].add(r["worker"])
    twice = (
        sum(r["seconds"] for r in compiled if len(workers[(r["kind"], r["what"])]) > 1) / 2
    )  # about half of those are the second copy
    print(f"{len(records)} records, {len(compiled)} compilations (>= {args.min_seconds} s)")
    for kind, s in by_kind.most_common():
        print(f"  {kind}: {s:.0f} s")
    print(f"  compiled in more than one worker: about {twice:.0f} s of repeats")
    print(f"\nper kernel (seconds, signatures), top {args.top}:")
    for name, s in by_kernel.most_common(args.top):
        print(f"  {s:7.1f}  {signatures[name]:3d}  {name}")
    print(f"\nper test file, top {args.top}:")
    for name, s in by_file.most_common(args.top):
        print(f"  {s:7.1f}  {name}")


if __name__ == "__main__":
    main()
