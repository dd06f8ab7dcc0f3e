"""Predicted against measured: one row of a report table, the hypothesis it tests, the test, its
error rates, and the rule that turns its numbers into a verdict.

A row holds a prediction ``p``, a measurement ``m`` with its 95% confidence interval ``[lo, hi]``
(the interval's quantile is 1.96, or Student's t with n − 1 degrees of freedom when the row states
its sample count ``n``), a tolerance ``tol`` (the finite-size bias one accepts at the report's
sizes), optionally an ``alternative`` ``a`` (the value a wrong model would give, which the data must
be able to tell from p) and a ``reach`` (the most extreme value the observable can show in the
direction the rule tests). Everything the verdict needs is in the row, so it can be derived again
from the stored numbers alone ([`recompute`][stochformer.measure.verdict.recompute]) and re-derived by hand from the page.

The verdict, in this order:

1. **not measured** without a measurement, **undetermined** when a number is not finite;
2. **inconclusive** when the measurement comes from fewer than `MIN_SAMPLES` samples (no
   interval is formed);
3. **not testable at this size** when the rule cannot fail: it would hold even if the observable
   showed its reach (e.g. a bound above the largest growth rate the energy can show);
4. **does not hold at this size** when the row's hypothesis is rejected within its family: a
   section's rows are one family, their p-values adjusted by Holm's step-down, and a row fails when
   its adjusted p-value is below `FAMILY_LEVEL`, so the chance that any row of a section fails
   while every hypothesis of the section is true is at most 5%;
5. otherwise **holds**, unless the data cannot tell the prediction from the alternative: for
   ``matches``, ``at_most`` and ``at_least`` when the interval's half-width (hi − lo)/2 exceeds the
   distance D = |a − p| − tol between the tolerance band and the alternative (the test then has power
   below one half against a), or when the row alone is significant (p-value < 0.05) but not within
   its family; for ``below`` and ``above`` when the interval contains p. Those rows are
   **inconclusive**.

The p-value of a row is that of the distance of m beyond the tolerance band, standardised by the
half of the interval that faces the prediction (SE = that half over its quantile): the row alone is
significant at 5% exactly when the interval clears the band (two-sided for ``matches``, one-sided
for the others).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal, Optional

Rule = Literal["matches", "at_most", "at_least", "below", "above"]

#: What each rule's row claims (its hypothesis H), as printed on the page; p = predicted, θ = the
#: true value of the measured quantity, tol = the row's tolerance.
HYPOTHESES: dict[str, str] = {
    "matches": "θ lies in [p − tol, p + tol]",
    "at_most": "θ ≤ p + tol (a bound)",
    "at_least": "θ ≥ p − tol",
    "below": "θ < p",
    "above": "θ > p",
}

#: The test of each rule, as printed on the page. [lo, hi] = the 95% CI, SE = the half of the CI
#: facing p over its quantile, Φ̄ = the normal (or Student's t) upper tail.
RULES: dict[str, str] = {
    "matches": "p-value 2Φ̄((|m − p| − tol)/SE), 1 inside the band; alone below 0.05 exactly when p ∉ [lo − tol, hi + tol]",
    "at_most": "p-value Φ̄((m − p − tol)/SE), one-sided; alone below 0.05 when m − 1.645 SE > p + tol",
    "at_least": "p-value Φ̄((p − tol − m)/SE), one-sided; alone below 0.05 when m + 1.645 SE < p − tol",
    "below": "holds if hi < p (the whole CI below p); p-value of a failure Φ̄((m − p)/SE)",
    "above": "holds if lo > p (the whole CI above p); p-value of a failure Φ̄((p − m)/SE)",
}

HOLDS = "holds"
FAILS = "does not hold at this size"
INCONCLUSIVE = "inconclusive"
NOT_TESTABLE = "not testable at this size"
NOT_MEASURED = "not measured"
UNDETERMINED = "undetermined"
#: every verdict, in the order of the page's counts
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_TESTABLE, NOT_MEASURED, UNDETERMINED)

#: the level of each row's confidence interval (95%)
LEVEL = 0.05
#: the family-wise rate of false failures of a section's rows (Holm's step-down over their p-values)
FAMILY_LEVEL = 0.05
#: fewer samples than this give no interval (the row is inconclusive)
MIN_SAMPLES = 3
#: a row with no stated alternative is judged against a = p ± max(ALT_RTOL·|p|, 2·tol)
ALT_RTOL = 0.5

Z95 = 1.959963984540054  # two-sided 95% normal quantile

#: the numbers a row stores (the rest of `Comparison.to_dict` is derived from them)
STORED_NUMBERS = ("predicted", "measured", "tol", "alternative", "reach", "n")
#: what `Comparison.to_dict` derives (never read back: [`recompute`][stochformer.measure.verdict.recompute] derives it again)
DERIVED = ("hypothesis", "p_value", "p_adjusted", "family", "power", "verdict")


def _finite(*values: Optional[float]) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def quantile(n: Optional[int]) -> float:
    """The two-sided 95% quantile of a row's interval: 1.96, or Student's t with n − 1 degrees of
    freedom for a mean of n samples.

    Parameters
    ----------
    n : int or None
        Samples behind the mean (None: normal errors).

    Returns
    -------
    float
        The quantile.
    """
    if n is None:
        return Z95
    from scipy.stats import t

    return float(t.ppf(1 - LEVEL / 2, n - 1))


def _upper_tail(z: float, n: Optional[int]) -> float:
    if n is None:
        return 0.5 * math.erfc(z / math.sqrt(2))
    from scipy.stats import t

    return float(t.sf(z, n - 1))


def _one_sided_quantile(n: Optional[int]) -> float:
    if n is None:
        return 1.6448536269514722
    from scipy.stats import t

    return float(t.ppf(1 - LEVEL, n - 1))


@dataclass(frozen=True)
class RowTest:
    """A row's own test before its family is taken into account: ``state`` is a verdict fixed by
    the row alone (not measured, undetermined, inconclusive for too few samples, not testable) or
    None; ``p_value`` (None when ``state`` is set); ``low_power``: the interval is too wide to tell
    p from the alternative; ``on_side``: for ``below``/``above``, the whole interval is on the
    predicted side of p; ``power``: the approximate power against the alternative.

    Attributes
    ----------
    state : str or None
        A verdict fixed by the row alone.
    p_value : float or None
        The row's p-value.
    low_power : bool
        The interval cannot tell p from the alternative.
    on_side : bool
        For ``below``/``above``: the whole interval is on the predicted side.
    power : float or None
        The approximate power against the alternative.
    """

    state: Optional[str]
    p_value: Optional[float] = None
    low_power: bool = False
    on_side: bool = False
    power: Optional[float] = None


def default_alternative(rule: str, p: float, tol: float) -> Optional[float]:
    """The alternative of a row that states none: p ± max(ALT_RTOL·|p|, 2·tol), above p for
    ``at_most``, below for ``at_least`` (None for ``below``/``above``, whose alternative is the other
    side of p).

    Parameters
    ----------
    rule : {"matches", "at_most", "at_least", "below", "above"}
        The rule (`RULES`).
    p : float
        The prediction.
    tol : float
        The tolerance.

    Returns
    -------
    float or None
        The alternative.
    """
    if rule in ("below", "above"):
        return None
    shift = max(ALT_RTOL * abs(p), 2 * tol)
    return p - shift if rule == "at_least" else p + shift


def _excess(rule: str, p: float, m: float, tol: float) -> tuple[float, bool]:
    """The signed distance of m beyond what the hypothesis allows, and whether the interval's lower
    half faces it."""
    if rule == "matches":
        return abs(m - p) - tol, p < m
    if rule == "at_most":
        return m - p - tol, True
    if rule == "at_least":
        return p - tol - m, False
    if rule == "below":
        return m - p, True
    return p - m, False  # above


def cannot_fail(rule: str, p: float, tol: float, reach: float) -> bool:
    """True when ``rule`` would not fail even if the observable showed its ``reach`` exactly.

    Parameters
    ----------
    rule : {"matches", "at_most", "at_least", "below", "above"}
        The rule (`RULES`).
    p : float
        The prediction.
    tol : float
        The tolerance.
    reach : float
        The most extreme value the observable can show.

    Returns
    -------
    bool
        Whether the rule cannot fail.
    """
    return _excess(rule, p, reach, tol)[0] <= 0


def row_test(rule: str, predicted: Optional[float], measured: Optional[float], lo: Optional[float], hi: Optional[float],
             tol: float = 0.0, alternative: Optional[float] = None, reach: Optional[float] = None,
             n: Optional[int] = None) -> RowTest:
    """The row's own test (see [`RowTest`][stochformer.measure.verdict.RowTest] and the module docstring).

    Parameters
    ----------
    rule : {"matches", "at_most", "at_least", "below", "above"}
        The rule (`RULES`).
    predicted : float or None
        p, the prediction.
    measured : float or None
        The measured value.
    lo, hi : float or None
        Its 95% interval.
    tol : float, optional
        The tolerance.
    alternative : float, optional
        The alternative a (default `default_alternative`).
    reach : float, optional
        The most extreme value the observable can show in the rule's direction.
    n : int, optional
        Samples behind a Student-t interval.

    Returns
    -------
    RowTest
        The row's own test.
    """
    if rule not in RULES:
        raise ValueError(f"rule: unknown rule {rule!r}; valid: {', '.join(RULES)}")
    if n is not None and n < MIN_SAMPLES:
        return RowTest(INCONCLUSIVE)
    if lo is None and hi is None and measured is None:
        return RowTest(NOT_MEASURED)
    if predicted is None or lo is None or hi is None or not _finite(predicted, lo, hi, tol):
        return RowTest(UNDETERMINED)
    p = float(predicted)
    if reach is not None and _finite(reach) and rule != "matches" and cannot_fail(rule, p, tol, reach):
        return RowTest(NOT_TESTABLE)
    m = float(measured) if measured is not None and _finite(measured) else (lo + hi) / 2
    q = quantile(n)
    excess, lower = _excess(rule, p, m, tol)
    half = max(0.0, (m - lo) if lower else (hi - m))
    se = half / q
    if se == 0:
        pval = 0.0 if excess > 0 else 1.0
    elif rule == "matches":
        pval = 1.0 if excess <= 0 else min(1.0, 2 * _upper_tail(excess / se, n))
    else:
        pval = _upper_tail(excess / se, n)
    if rule in ("below", "above"):
        return RowTest(None, pval, on_side=(hi < p if rule == "below" else lo > p))
    a = default_alternative(rule, p, tol) if alternative is None else alternative
    assert a is not None, "default_alternative: None only for below/above, returned above"
    # the distance from the band to the alternative, on the side the rule guards (an alternative on
    # the other side of a bound is none: the row can then never hold)
    distance = {"matches": abs(a - p), "at_most": a - p, "at_least": p - a}[rule] - tol
    width = (hi - lo) / 2
    se_mid = width / q
    crit = q if rule == "matches" else _one_sided_quantile(n)
    if se_mid == 0:
        power = 1.0 if distance > 0 else 0.0
    else:
        power = 1.0 - _upper_tail(distance / se_mid - crit, n) if distance > 0 else 0.0
    return RowTest(None, pval, low_power=width > distance or (width > 0 and distance <= 0), power=power)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: sorted ascending, the i-th smallest
    (from 0) becomes max over j ≤ i of min(1, (k − j)·p_(j)). A row fails when its adjusted value is
    below the family level; the chance of any false failure is then at most that level for any
    dependence between the rows.

    Parameters
    ----------
    p_values : list of float
        The family's p-values.

    Returns
    -------
    list of float
        The adjusted p-values, in the order given.
    """
    k = len(p_values)
    order = sorted(range(k), key=lambda i: p_values[i])
    out = [1.0] * k
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * p_values[i]))
        out[i] = running
    return out


def _tested_p(t: RowTest) -> float:
    """The p-value of a tested row (``state`` None: [`row_test`][stochformer.measure.verdict.row_test] always gives one)."""
    if t.p_value is None:
        raise ValueError("RowTest: a tested row (state None) must have a p_value")
    return t.p_value


def family_verdicts(tests: list[RowTest], rules: list[str]) -> list[tuple[str, Optional[float]]]:
    """(verdict, Holm-adjusted p-value) of each row of one family (module docstring, steps 4–5).

    Parameters
    ----------
    tests : list of RowTest
        The rows' own tests.
    rules : list of str
        Their rules.

    Returns
    -------
    list of tuple
        (verdict, adjusted p-value or None) per row.
    """
    tested = [i for i, t in enumerate(tests) if t.state is None]
    adjusted = dict(zip(tested, holm([_tested_p(tests[i]) for i in tested])))
    out: list[tuple[str, Optional[float]]] = []
    for i, (t, rule) in enumerate(zip(tests, rules)):
        if t.state is not None:
            out.append((t.state, None))
            continue
        adj = adjusted[i]
        if adj < FAMILY_LEVEL:
            verdict = FAILS
        elif rule in ("below", "above"):
            verdict = HOLDS if t.on_side else INCONCLUSIVE
        elif t.low_power or _tested_p(t) < LEVEL:
            verdict = INCONCLUSIVE
        else:
            verdict = HOLDS
        out.append((verdict, adj))
    return out


def decide(rule: str, predicted: Optional[float], lo: Optional[float], hi: Optional[float], tol: float = 0.0,
           **kw) -> str:
    """The verdict of one row alone (a family of one) for prediction p and 95% CI [lo, hi]; ``kw``:
    ``measured``, ``alternative``, ``reach``, ``n``.

    Parameters
    ----------
    rule : {"matches", "at_most", "at_least", "below", "above"}
        The rule (`RULES`).
    predicted : float or None
        p.
    lo, hi : float or None
        The 95% interval.
    tol : float, optional
        The tolerance.
    **kw : Any
        ``measured``, ``alternative``, ``reach``, ``n``.

    Returns
    -------
    str
        The verdict.
    """
    t = row_test(rule, predicted, kw.pop("measured", None), lo, hi, tol, **kw)
    return family_verdicts([t], [rule])[0][0]


@dataclass
class Comparison:
    """One row: ``quantity`` predicted (``predicted``, from theory) against ``measured`` with its
    95% CI ``ci = (lo, hi)``, decided by ``rule`` with tolerance ``tol`` against the ``alternative``
    (default [`default_alternative`][stochformer.measure.verdict.default_alternative]), ``reach`` the most extreme value the observable can show
    in the rule's direction (a bound beyond it is not testable), ``n`` the samples behind a sample
    mean (Student's t; fewer than `MIN_SAMPLES` give no interval). ``verdict`` and the test's
    numbers are computed, for the row alone; [`recompute`][stochformer.measure.verdict.recompute] judges a section's rows as a family.

    Parameters
    ----------
    quantity : str
        What is compared.
    predicted : float or None
        p, from theory.
    measured : float, optional
        The measured value.
    ci : tuple of float, optional
        Its 95% interval (lo, hi).
    rule : {"matches", "at_most", "at_least", "below", "above"}
        The rule, default ``matches`` (`RULES`).
    tol : float, optional
        The tolerance.
    note : str, optional
        A note shown beside the row.
    alternative : float, optional
        The alternative a.
    reach : float, optional
        The most extreme value the observable can show.
    n : int, optional
        Samples behind a Student-t interval.
    """

    quantity: str
    predicted: Optional[float]
    measured: Optional[float] = None
    ci: Optional[tuple[Optional[float], Optional[float]]] = None
    rule: str = "matches"
    tol: float = 0.0
    note: str = ""
    alternative: Optional[float] = None
    reach: Optional[float] = None
    n: Optional[int] = None
    verdict: str = field(init=False)
    p_value: Optional[float] = field(init=False, default=None)
    p_adjusted: Optional[float] = field(init=False, default=None)
    power: Optional[float] = field(init=False, default=None)
    family: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        if not isinstance(self.quantity, str):
            raise TypeError(f"quantity: must be a string (got {type(self.quantity).__name__})")
        self._attempted = self.measured is not None or self.ci is not None
        self.predicted = _clean(self.predicted)
        self.measured = _clean(self.measured)
        self.alternative = _clean(self.alternative)
        self.reach = _clean(self.reach)
        self.tol = float(self.tol)
        if self.tol < 0 or not math.isfinite(self.tol):
            raise ValueError(f"tol: must be a finite number >= 0 (got {self.tol})")
        if self.n is not None:
            if isinstance(self.n, bool) or float(self.n) != int(self.n) or int(self.n) < 1:
                raise ValueError(f"n: must be a whole number of samples >= 1 (got {self.n})")
            self.n = int(self.n)
        if self.ci is not None:
            lo, hi = (_clean(self.ci[0]), _clean(self.ci[1]))
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"ci: lo must be <= hi (got [{lo}, {hi}])")
            self.ci = (lo, hi)
        elif self.measured is not None and self.n is None:
            self.ci = (self.measured, self.measured)  # exact (no sampling error), e.g. a count
        test = self.own_test()
        self._judge(test, family_verdicts([test], [self.rule])[0], 1)

    def _judge(self, test: RowTest, verdict: tuple[str, Optional[float]], family: int) -> None:
        self.verdict, self.p_adjusted = verdict
        self.p_value, self.power, self.family = test.p_value, test.power, family

    def own_test(self) -> RowTest:
        """The row's own test ([`row_test`][stochformer.measure.verdict.row_test]); a measurement that was made but is not finite is
        undetermined.

        Returns
        -------
        RowTest
            The row's own test.
        """
        lo, hi = self.ci if self.ci is not None else (None, None)
        if self._attempted and (self.n is None or self.n >= MIN_SAMPLES) and (lo is None or hi is None):
            return RowTest(UNDETERMINED)
        return row_test(self.rule, self.predicted, self.measured, lo, hi, self.tol, self.alternative, self.reach, self.n)

    @classmethod
    def from_mean_se(cls, quantity: str, predicted: Optional[float], mean: float, se: float, n: Optional[int] = None,
                     **kw) -> "Comparison":
        """A row from a sample mean and its standard error: CI = mean ± q·SE, q = 1.96, or Student's
        t quantile with n − 1 degrees of freedom for a mean of ``n`` samples (no interval for
        n < `MIN_SAMPLES`).

        Parameters
        ----------
        quantity : str
            What is compared.
        predicted : float or None
            p.
        mean : float
            The sample mean.
        se : float
            Its standard error.
        n : int, optional
            Samples (Student's t).
        **kw : Any
            Further fields of the row.

        Returns
        -------
        Comparison
            The row.
        """
        if n is not None and n < MIN_SAMPLES:
            return cls(quantity, predicted, mean, None, n=n, **kw)
        h = quantile(n) * se
        return cls(quantity, predicted, mean, (mean - h, mean + h), n=n, **kw)

    @classmethod
    def from_samples(cls, quantity: str, predicted: Optional[float], samples, **kw) -> "Comparison":
        """A row from independent samples (any shape, flattened): their mean, SE and count
        (Student's t interval).

        Parameters
        ----------
        quantity : str
            What is compared.
        predicted : float or None
            p.
        samples : array_like
            Independent samples.
        **kw : Any
            Further fields of the row.

        Returns
        -------
        Comparison
            The row.
        """
        import numpy as np

        x = np.asarray(samples, dtype=float).ravel()
        se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0
        return cls.from_mean_se(quantity, predicted, float(x.mean()), se, n=len(x), **kw)

    @classmethod
    def from_fraction(cls, quantity: str, predicted: Optional[float], successes: int, trials: int, **kw) -> "Comparison":
        """A row from a count of ``successes`` in ``trials`` independent trials: the fraction with its
        Wilson score interval ([`stochformer.measure.stats.wilson_interval`][stochformer.measure.stats.wilson_interval]).

        Parameters
        ----------
        quantity : str
            What is compared.
        predicted : float or None
            p.
        successes : int
            Successes.
        trials : int
            Independent trials.
        **kw : Any
            Further fields of the row.

        Returns
        -------
        Comparison
            The row.
        """
        from .stats import wilson_interval

        if trials < MIN_SAMPLES:
            return cls(quantity, predicted, successes / trials, None, n=trials, **kw)
        lo, hi = wilson_interval(successes, trials)
        return cls(quantity, predicted, successes / trials, (lo, hi), **kw)

    def to_dict(self) -> dict:
        """The row as stored: its fields, the hypothesis of its rule, then the derived fields (verdict last).

        Returns
        -------
        dict
            JSON-able.
        """
        out = asdict(self)
        out["hypothesis"] = HYPOTHESES.get(self.rule, "")
        for key in DERIVED:  # the derived fields last, the verdict at the very end
            out[key] = out.pop(key)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        """A row from its stored form (the derived fields dropped: they are derived again).

        Parameters
        ----------
        data : dict
            A row of `to_dict`.

        Returns
        -------
        Comparison
            The row.
        """
        data = {k: v for k, v in data.items() if k not in DERIVED}
        if data.get("ci") is not None:
            data["ci"] = tuple(data["ci"])
        return cls(**data)


def _clean(x: Optional[float]) -> Optional[float]:
    """A float, or None when missing or not finite (NaN never reaches the page or the JSON)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def judge(rows: list[Comparison]) -> list[Comparison]:
    """``rows`` judged as one family (in place; returned): every verdict after Holm's adjustment
    over the family's p-values (module docstring).

    Parameters
    ----------
    rows : list of Comparison
        One family.

    Returns
    -------
    list of Comparison
        ``rows``, judged.
    """
    tests = [r.own_test() for r in rows]
    for r, t, v in zip(rows, tests, family_verdicts(tests, [r.rule for r in rows])):
        r._judge(t, v, sum(x.state is None for x in tests))
    return rows


def recompute(rows: list) -> list[dict]:
    """The rows of a stored table (one section: one family) with every verdict derived again from
    the rows' own numbers, so a stored verdict is never trusted; a row that is not a valid
    [`Comparison`][stochformer.measure.verdict.Comparison] becomes an ``undetermined`` row saying so (and is no part of the family).

    Parameters
    ----------
    rows : list
        Stored rows (dicts).

    Returns
    -------
    list of dict
        The rows with their verdicts derived again.
    """
    out: list[tuple[Comparison, bool]] = []
    for row in rows if isinstance(rows, list) else []:
        try:
            out.append((Comparison.from_dict(row), True))
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError):
            name = row.get("quantity") if isinstance(row, dict) else None
            out.append((_invalid(str(name or "?")), False))
    judge([r for r, valid in out if valid])
    return [r.to_dict() for r, _ in out]


def _invalid(name: str) -> Comparison:
    """The row standing for a stored row that is not a valid [`Comparison`][stochformer.measure.verdict.Comparison]."""
    row = Comparison(name, None, note="invalid stored row")
    row.verdict = UNDETERMINED
    return row


def counts(rows: list[dict]) -> dict[str, int]:
    """How many rows have each verdict of `VERDICTS` (rows as [`recompute`][stochformer.measure.verdict.recompute] returns them).

    Parameters
    ----------
    rows : list of dict
        Judged rows.

    Returns
    -------
    dict of str to int
        Verdict → count.
    """
    out = dict.fromkeys(VERDICTS, 0)
    for r in rows:
        if r.get("verdict") in out:
            out[r["verdict"]] += 1
    return out
