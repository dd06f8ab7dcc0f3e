"""The measured false-failure rate of each section's row family against the level the page states.

    python benchmarks/false_failures.py --budget 900                 # every tiny section, 900 s in all
    python benchmarks/false_failures.py --sections motions sync --replicates 400
    python benchmarks/false_failures.py --budget 60 --json out.json  # a smoke run
    python benchmarks/false_failures.py --sections motions --set motions.bootstrap=400 --budget 120

Each section of the ``tiny`` profile is run again and again with seeds 1, 2, … (``seed=k``: every
random draw of the section changes, nothing else), and each replicate's rows are judged as the page
judges them, as one family (:func:`stochformer.measure.verdict.recompute`, Holm over the rows'
p-values at the family-wise level ``FAMILY_LEVEL``). Per section: the replicates run, the fraction
of replicates in which some row "does not hold" with its Clopper–Pearson 95% interval, the same
fraction had each row been judged alone at 5% (no family), and the share of rows that were
inconclusive or not testable.

Where every prediction of a section is true at the sizes run, the family's rate is at most the
stated level; a rate whose interval lies above it is not chance: a row whose prediction is off at
this size (a finite-size bias larger than its tolerance, or a claim that does not hold), named in
the output with how often it failed.

The sections' figures are not drawn (the rows do not depend on them). The budget is shared equally
between the sections; a section stops at ``--replicates`` or when its share is spent.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from stochformer.report import registry
from stochformer.report.sections import beyond, paper, phase, theory, variants
from stochformer.report.registry import Figure, SectionContext
from stochformer.report.runner import plan
from stochformer.measure.verdict import FAILS, FAMILY_LEVEL, INCONCLUSIVE, LEVEL, NOT_TESTABLE, Comparison, recompute
from stochformer.measure.stats import clopper_pearson_interval


def _no_figure(fig, name: str, caption: str, dpi: int = 100) -> Figure:
    import matplotlib.pyplot as plt

    plt.close(fig)
    return Figure(name, caption, "")


def _without_figures() -> None:
    for module in (registry, paper, phase, variants, beyond, theory):
        module.figure_png = _no_figure


def replicate(name: str, seed: int, workdir: Path, overrides: tuple[str, ...] = ()) -> list[dict]:
    """The rows of section ``name`` at the tiny profile with ``seed`` (and ``overrides``,
    ``SECTION.FIELD=VALUE``), judged as one family."""
    [item] = [p for p in plan("tiny", only=[name], overrides=[f"seed={seed}", *overrides]) if p.section.name == name]
    out = item.section.run(item.config, SectionContext(workdir=workdir / f"{name}-{seed}"))
    return recompute([c.to_dict() for c in out.comparisons])


def measure(name: str, replicates: int, budget: float, workdir: Path, overrides: tuple[str, ...] = ()) -> dict:
    """Replicates of one section until ``replicates`` or ``budget`` seconds: failure counts."""
    start = time.perf_counter()
    runs = family_fail = alone_fail = rows = inconclusive = untestable = 0
    by_row: collections.Counter = collections.Counter()
    while runs < replicates and (runs == 0 or time.perf_counter() - start < budget):
        judged = replicate(name, runs + 1, workdir, overrides)
        runs += 1
        rows += len(judged)
        family_fail += any(r["verdict"] == FAILS for r in judged)
        alone_fail += any(Comparison.from_dict(r).verdict == FAILS for r in judged)
        inconclusive += sum(r["verdict"] == INCONCLUSIVE for r in judged)
        untestable += sum(r["verdict"] == NOT_TESTABLE for r in judged)
        by_row.update(r["quantity"] for r in judged if r["verdict"] == FAILS)
    lo, hi = clopper_pearson_interval(family_fail, runs) if runs >= 3 else (float("nan"), float("nan"))
    return {"section": name, "replicates": runs, "rows_per_replicate": rows / runs, "family_failures": family_fail,
            "family_rate": family_fail / runs, "family_ci": [lo, hi], "alone_rate": alone_fail / runs,
            "inconclusive_share": inconclusive / max(rows, 1), "not_testable_share": untestable / max(rows, 1),
            "seconds": time.perf_counter() - start, "failing_rows": by_row.most_common(3)}


def table(results: list[dict]) -> str:
    """The results as a markdown table."""
    lines = [f"| section | replicates | rows | some row fails (family, Holm at {FAMILY_LEVEL:g}) | 95% CI | "
             f"some row fails alone at {LEVEL:g} | inconclusive | not testable | most frequent failure |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
    for r in results:
        lo, hi = r["family_ci"]
        worst = "; ".join(f"{q} ({n}×)" for q, n in r["failing_rows"][:1]) or "—"
        lines.append(f"| {r['section']} | {r['replicates']} | {r['rows_per_replicate']:.1f} | {r['family_rate']:.3f} | "
                     f"[{lo:.3f}, {hi:.3f}] | {r['alone_rate']:.3f} | {r['inconclusive_share']:.2f} | "
                     f"{r['not_testable_share']:.2f} | {worst} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="*", default=None, help="section names (default: every section)")
    parser.add_argument("--replicates", type=int, default=500, help="at most this many replicates per section")
    parser.add_argument("--budget", type=float, default=900.0, help="seconds in all, shared between the sections")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="SECTION.FIELD=VALUE on top of the tiny sizes (repeatable)")
    parser.add_argument("--quick", action="store_true", help="the first section, one replicate: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.replicates, args.budget = 1, 30.0
        args.sections = args.sections or [plan("tiny")[0].section.name]
    if args.replicates < 1 or args.budget <= 0:
        parser.error("--replicates must be >= 1 and --budget > 0")
    torch.set_num_threads(args.threads)
    _without_figures()
    names = args.sections or [p.section.name for p in plan("tiny")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            results.append(measure(name, args.replicates, args.budget / len(names), Path(tmp), tuple(args.overrides)))
            r = results[-1]
            print(f"{name}: {r['family_failures']}/{r['replicates']} replicates with a failure "
                  f"({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
