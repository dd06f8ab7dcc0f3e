"""Predicted against measured: one row of a report table and the explicit rule that turns its
numbers into a verdict.

A measurement comes with a 95% confidence interval ``[lo, hi]``; a rule compares it with the
prediction, allowing an absolute tolerance ``tol`` stated beside it (the finite-size bias one
accepts at the report's sizes). The rules are printed on the page, so every verdict can be
re-derived by hand from the numbers in the same row.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal, Optional

Rule = Literal["matches", "at_most", "at_least", "below", "above"]

#: The text of each rule, as printed on the page. p = predicted, [lo, hi] = 95% CI of the
#: measurement, tol = the row's tolerance.
RULES: dict[str, str] = {
    "matches": "holds if the prediction lies in the measurement's 95% CI widened by tol: lo − tol ≤ p ≤ hi + tol",
    "at_most": "holds if the measurement is not above the prediction (a bound): lo ≤ p + tol",
    "at_least": "holds if the measurement is not below the prediction: hi ≥ p − tol",
    "below": "holds if the whole 95% CI lies below the prediction: hi < p",
    "above": "holds if the whole 95% CI lies above the prediction: lo > p",
}

HOLDS = "holds"
FAILS = "does not hold at this size"
NOT_MEASURED = "not measured"
UNDETERMINED = "undetermined"

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def _finite(*values: Optional[float]) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def decide(rule: str, predicted: Optional[float], lo: Optional[float], hi: Optional[float], tol: float = 0.0) -> str:
    """The verdict of ``rule`` (a key of :data:`RULES`) for prediction p and 95% CI [lo, hi]."""
    if rule not in RULES:
        raise ValueError(f"rule: unknown rule {rule!r}; valid: {', '.join(RULES)}")
    if lo is None and hi is None:
        return NOT_MEASURED
    if not _finite(predicted, lo, hi):
        return UNDETERMINED
    p = float(predicted)
    ok = {
        "matches": lo - tol <= p <= hi + tol,
        "at_most": lo <= p + tol,
        "at_least": hi >= p - tol,
        "below": hi < p,
        "above": lo > p,
    }[rule]
    return HOLDS if ok else FAILS


@dataclass
class Comparison:
    """One row: ``quantity`` predicted (``predicted``, from theory) against ``measured`` with its
    95% CI ``ci = (lo, hi)``, decided by ``rule`` with tolerance ``tol``. ``verdict`` is computed."""

    quantity: str
    predicted: Optional[float]
    measured: Optional[float] = None
    ci: Optional[tuple[float, float]] = None
    rule: str = "matches"
    tol: float = 0.0
    note: str = ""
    verdict: str = field(init=False)

    def __post_init__(self) -> None:
        attempted = self.measured is not None or self.ci is not None
        self.predicted = _clean(self.predicted)
        self.measured = _clean(self.measured)
        if self.ci is not None:
            self.ci = (_clean(self.ci[0]), _clean(self.ci[1]))
        elif self.measured is not None:
            self.ci = (self.measured, self.measured)  # exact (no sampling error), e.g. a count
        lo, hi = self.ci if self.ci is not None else (None, None)
        if attempted and (lo is None or hi is None):
            self.verdict = UNDETERMINED  # a measurement was made but is not finite
        else:
            self.verdict = decide(self.rule, self.predicted, lo, hi, self.tol)

    @classmethod
    def from_mean_se(cls, quantity: str, predicted: Optional[float], mean: float, se: float, **kw) -> "Comparison":
        """A row from a sample mean and its standard error (CI = mean ± 1.96 SE)."""
        return cls(quantity, predicted, mean, (mean - Z95 * se, mean + Z95 * se), **kw)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        data = {k: v for k, v in data.items() if k != "verdict"}
        if data.get("ci") is not None:
            data["ci"] = tuple(data["ci"])
        return cls(**data)


def _clean(x: Optional[float]) -> Optional[float]:
    """A float, or None when missing or not finite (NaN never reaches the page or the JSON)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def recompute(rows: list) -> list[dict]:
    """The rows of a stored table with every verdict derived again from the row's own numbers, so
    a stored verdict is never trusted; a row that is not a valid :class:`Comparison` becomes an
    ``undetermined`` row saying so."""
    out = []
    for row in rows if isinstance(rows, list) else []:
        try:
            out.append(Comparison.from_dict(row).to_dict())
        except (TypeError, ValueError, KeyError, AttributeError, IndexError):
            name = row.get("quantity") if isinstance(row, dict) else None
            out.append(Comparison(str(name or "?"), None, note="invalid stored row").to_dict() | {"verdict": UNDETERMINED})
    return out
