"""Nothing lost between test runs: node ids and line coverage, before against after.

Compares a recorded list of test node ids and a coverage JSON (``pytest-cov``'s
``--cov-report=json:FILE``) from one run with those of another, and writes the
comparison to ``benchmarks/results/test_tiers.json`` and a short table beside it::

    python benchmarks/tier_report.py --ids-before B.txt --cov-before B.json \\
        --ids-full F.txt --ids-default D.txt --cov-after A.json

``@benchmarks/results/tier_report_args.txt`` adds the renames and the removals
on purpose recorded so far (one argument a line).  ``--ids-*`` files hold one
node id a line (``pytest --collect-only -q``).  Every node id of the earlier
run must be in the full tier; coverage is compared per source file, with
``compat/`` of older runs read as ``lasagne_bn_compat/`` (the package's name
since wave 3).  Exits 1 when a node id is missing or a file's coverage dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def read_ids(path: Path) -> set[str]:
    return {line.strip() for line in path.read_text().splitlines() if "::" in line}


def read_coverage(path: Path) -> dict[str, tuple[int, int]]:
    """``{file: (covered lines, statements)}``, file names in today's package layout."""
    files = json.loads(path.read_text())["files"]
    out = {}
    for name, data in files.items():
        if name.startswith("compat/"):
            name = "lasagne_bn_compat/" + name[len("compat/") :]
        summary = data["summary"]
        out[name] = (summary["covered_lines"], summary["num_statements"])
    return out


def percent(covered: int, statements: int) -> float:
    return 100.0 * covered / statements if statements else 100.0


def compare(args: argparse.Namespace) -> dict:
    before, full = read_ids(args.ids_before), read_ids(args.ids_full)
    renames = dict(r.split("=", 1) for r in args.rename)
    gone = dict(g.split("=", 1) for g in args.gone)
    for old, new in renames.items():  # a module renamed since: its tests' ids say so
        before = {i.replace(old, new) for i in before}
    default = read_ids(args.ids_default) if args.ids_default else set()
    report: dict = {
        "node_ids": {
            "before": len(before),
            "full_tier": len(full),
            "default_tier": len(default),
            "missing_from_full_tier": sorted(before - full - set(gone)),
            "gone_on_purpose": {i: why for i, why in gone.items() if i in before - full},
            "new": len(full - before),
            "renamed": renames,
        }
    }
    if args.cov_before and args.cov_after:
        cov_before, cov_after = read_coverage(args.cov_before), read_coverage(args.cov_after)
        lower = {}
        for name, (covered, statements) in sorted(cov_before.items()):
            after = cov_after.get(name)
            if after is None:
                continue  # a file removed or renamed by the change: counted in the totals
            if percent(*after) < percent(covered, statements) - 0.05:
                lower[name] = [round(percent(covered, statements), 1), round(percent(*after), 1)]
        totals = {}
        for label, cov in (("before", cov_before), ("after", cov_after)):
            covered = sum(c for c, _ in cov.values())
            statements = sum(s for _, s in cov.values())
            totals[label] = {
                "covered": covered,
                "statements": statements,
                "percent": round(percent(covered, statements), 2),
            }
        report["coverage"] = {"totals": totals, "files_lower": lower}
    return report


def table(report: dict) -> str:
    ids = report["node_ids"]
    lines = [
        "# Test tiers: nothing lost",
        "",
        "Made by `benchmarks/tier_report.py` from `test_tiers.json`.",
        "",
        "| | count |",
        "|---|---|",
        f"| node ids before | {ids['before']} |",
        f"| full tier | {ids['full_tier']} |",
        f"| default tier | {ids['default_tier']} |",
        f"| before, missing from the full tier | {len(ids['missing_from_full_tier'])} |",
        f"| new since | {ids['new']} |",
    ]
    if ids.get("renamed"):
        lines += ["", "Renamed since (read so in the earlier ids):"]
        lines += [f"- `{old}` -> `{new}`" for old, new in ids["renamed"].items()]
    if ids.get("gone_on_purpose"):
        lines += ["", "Removed on purpose:"]
        lines += [f"- `{i}`: {why}" for i, why in ids["gone_on_purpose"].items()]
    missing = ids["missing_from_full_tier"]
    if missing:
        lines += ["", "Missing from the full tier:"] + [f"- `{m}`" for m in missing]
    if "coverage" in report:
        t = report["coverage"]["totals"]
        lines += [
            "",
            "| line coverage (`lasagne_bn`, `lasagne_bn_compat`) | covered / statements | % |",
            "|---|---|---|",
        ]
        for label in ("before", "after"):
            lines.append(
                f"| {label} | {t[label]['covered']} / {t[label]['statements']} "
                f"| {t[label]['percent']} |"
            )
        lower = report["coverage"]["files_lower"]
        lines += ["", f"Files whose coverage is lower after: {len(lower)}"]
        lines += [f"- `{name}`: {a}% -> {b}%" for name, (a, b) in lower.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], fromfile_prefix_chars="@"
    )
    parser.add_argument("--ids-before", type=Path, required=True)
    parser.add_argument("--ids-full", type=Path, required=True)
    parser.add_argument("--ids-default", type=Path)
    parser.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="read OLD as NEW in the earlier node ids (a module renamed since); repeatable",
    )
    parser.add_argument(
        "--gone",
        action="append",
        default=[],
        metavar="ID=WHY",
        help="an earlier node id removed on purpose, and why (listed, not counted missing)",
    )
    parser.add_argument("--cov-before", type=Path)
    parser.add_argument("--cov-after", type=Path)
    parser.add_argument("--out", type=Path, default=RESULTS / "test_tiers.json")
    args = parser.parse_args(argv)
    report = compare(args)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(table(report))
    print(table(report), end="")
    lost = report["node_ids"]["missing_from_full_tier"] or report.get("coverage", {}).get(
        "files_lower"
    )
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
