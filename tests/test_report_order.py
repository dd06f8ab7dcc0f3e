"""The report's sections and their order: exactly the page's, as declared by the import order of
``stochformer.report.sections``."""

from __future__ import annotations

from stochformer.report import registered

#: The report's sections in the order of the page (SPEC §6, then §7, then the claims beyond the
#: paper's figures); a change of the order or of the set is a change of the report.
REPORT_ORDER = [
    "clusters", "scenarios", "table", "convergence", "chaos", "chaos-exact", "sync", "motions", "phase-gamma",
    "phase-dim", "variants", "bridge", "joint-limit", "repulsion", "phase-transformer", "phase-dim-transformer",
    "exact-theory", "neighbours",
]


def test_the_sections_in_the_order_of_the_report() -> None:
    assert [s.name for s in registered()] == REPORT_ORDER
