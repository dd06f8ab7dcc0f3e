"""The sections of the report, one per claim, each registering itself
(`register`) when its module is imported.

The order of the report is declared here, and only here: the modules below are imported in the
order of the page, and each registers its sections in its own order.

- `paper`: SPEC §6.1–§6.6 and §3–§4 (``clusters``, ``scenarios``, ``table``, ``convergence``,
  ``chaos``, ``chaos-exact``, ``sync``, ``motions``);
- `phase`: SPEC §6.6's phase diagrams on the SDE (``phase-gamma``, ``phase-dim``);
- `variants`: SPEC §7 (``variants``, ``bridge``);
- `beyond`: the paper's claims its figures do not show (``joint-limit``, ``repulsion``,
  ``phase-transformer``, ``phase-dim-transformer``);
- `theory`: SPEC §8's exact results beside simulation (``exact-theory``);
- `neighbours`: the neighbouring stochastic limits, each against its own prediction (``neighbours``).

[`rows`][stochformer.report.sections.rows] holds the row builders and tolerances the sections share; it registers nothing.
"""

from __future__ import annotations

from . import paper, phase, variants, beyond, theory, neighbours  # noqa: F401  (in the order of the report: they register themselves)

__all__ = ["beyond", "neighbours", "paper", "phase", "theory", "variants"]
