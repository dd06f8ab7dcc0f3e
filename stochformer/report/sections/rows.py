"""The row builders and tolerances shared between the report's sections: each turns a measured
number (a mean and its SE, a fitted exponent, an extrapolated rate) and its prediction into one
predicted-vs-measured row ([`Comparison`][stochformer.measure.verdict.Comparison]) under a stated rule.

Used by the sections of `paper`, `phase` and `beyond`; the rows particular to
one section stay in its module.
"""

from __future__ import annotations

from typing import Optional

from ...measure.stats import MIN_SAMPLES
from ...measure.verdict import Comparison, quantile

#: Finite-size allowances of the "matches" rows, as fractions of |predicted|: first-order time
#: discretisation (Δt = T/L) and finite horizons bias the measured rates; kernel moments are
#: unbiased Monte Carlo means (only the finite difference h of κ' biases them).
RATE_RTOL = 0.10
KERNEL_RTOL = 0.02


def bound_alternative(bound: Optional[float]) -> Optional[float]:
    """The alternative a bound row is judged against: no decay (rate 0) for a decay bound (< 0),
    else the default ([`default_alternative`][stochformer.measure.verdict.default_alternative]).

    Parameters
    ----------
    bound : float or None
        The bound.

    Returns
    -------
    float or None
        The alternative.
    """
    return 0.0 if bound is not None and bound < 0 else None


def bound_row(quantity: str, bound: Optional[float], measured: float, se: float, err: float = 0.0,
              reach: Optional[float] = None, n: Optional[int] = None, note: str = "") -> Comparison:
    """Theorem 1.4's bound ``bound`` = ε + λ̄' on an energy rate: "at_most" with no tolerance,
    interval measured ± (q·SE + err) (err an extrapolation error, q = 1.96 or Student's t for ``n``
    samples), judged against no decay ([`bound_alternative`][stochformer.report.sections.rows.bound_alternative]); ``reach`` is the largest rate the
    observable can show (a bound at or above it is not testable at this size).

    Parameters
    ----------
    quantity : str
        What is compared.
    bound : float or None
        ε + λ̄'.
    measured : float
        The measured rate.
    se : float
        Its SE.
    err : float, optional
        Its extrapolation error.
    reach : float, optional
        The largest rate the observable can show.
    n : int, optional
        Samples (Student's t).
    note : str, optional
        A note.

    Returns
    -------
    Comparison
        The row.
    """
    if n is not None and n < MIN_SAMPLES:
        return Comparison(quantity, bound, measured, None, rule="at_most", reach=reach, n=n, note=note,
                          alternative=bound_alternative(bound))
    half = quantile(n) * se + err
    text = f"reach {reach:.3g}: the largest rate E_β can show here" if reach is not None else ""
    return Comparison(quantity, bound, measured, (measured - half, measured + half), rule="at_most", n=n, reach=reach,
                      alternative=bound_alternative(bound), note="; ".join(x for x in (note, text) if x))


def rate_row(quantity: str, predicted: Optional[float], measured: float, se: float, rtol: float = RATE_RTOL,
             note: str = "", n: Optional[int] = None, alternative: Optional[float] = None) -> Comparison:
    """A rate against its closed form, "matches" with tol ``rtol``·|p| (default `RATE_RTOL`),
    from a mean and SE (of ``n`` samples: Student's t), judged against ``alternative``.

    Parameters
    ----------
    quantity : str
        What is compared.
    predicted : float or None
        The closed form.
    measured : float
        The measured rate.
    se : float
        Its SE.
    rtol : float, optional
        The relative tolerance.
    note : str, optional
        A note.
    n : int, optional
        Samples (Student's t).
    alternative : float, optional
        The alternative.

    Returns
    -------
    Comparison
        The row.
    """
    tol = rtol * abs(predicted) if predicted is not None else 0.0
    return Comparison.from_mean_se(quantity, predicted, measured, se, n=n, rule="matches", tol=tol, alternative=alternative,
                                   note=note or f"tol = {rtol:g}·|predicted| (finite-size allowance)")


#: Allowance of a rate extrapolated to Δt → 0, as a fraction of |predicted|: what the extrapolation
#: leaves (finite width m of the transformer, Δt³ terms); the extrapolation error is in the interval.
EXTRAPOLATED_RTOL = 0.03


def extrapolated_rate_row(quantity: str, predicted: Optional[float], measured: float, se: float,
                          err: float, rule: str = "matches", rtol: float = EXTRAPOLATED_RTOL, note: str = "",
                          n: Optional[int] = None) -> Comparison:
    """A rate extrapolated to Δt → 0 (``sync.richardson``): interval measured ± (q·SE + err), err the
    extrapolation error, q = 1.96 or Student's t for an SE of ``n`` samples, ``rule`` ("matches", or
    "at_most" for a bound) with tol ``rtol``·|p|; at the boundary p = 0 the interval alone decides.

    Parameters
    ----------
    quantity : str
        What is compared.
    predicted : float or None
        The closed form.
    measured : float
        The extrapolated rate.
    se : float
        Its SE.
    err : float
        Its extrapolation error.
    rule : str, optional
        ``matches`` or ``at_most``.
    rtol : float, optional
        The relative tolerance.
    note : str, optional
        A note.
    n : int, optional
        Samples (Student's t).

    Returns
    -------
    Comparison
        The row.
    """
    q = quantile(n)
    half = q * se + err
    tol = rtol * abs(predicted) if predicted is not None else 0.0
    return Comparison(quantity, predicted, measured, (measured - half, measured + half), rule=rule, tol=tol, n=n,
                      note=(note + "; " if note else "") + f"Δt → 0 (Richardson over L, L/2, L/4 steps); CI = ± ({q:.3g} SE "
                           f"+ extrapolation error {err:.2g}); tol = {rtol:g}·|predicted|")


def fit_row(quantity: str, predicted: Optional[float], fit: dict, rule: str, tol: float, note: str,
            alternative: Optional[float] = None) -> Comparison:
    """A row from a fitted exponent ``fit`` = {value|exponent, ci, n}: its value against ``predicted``
    under ``rule`` with tolerance ``tol`` (e.g. `SLOPE_TOL`), judged against ``alternative``;
    the interval is the fit's ``ci`` (a bootstrap interval, Student's t over its ``n`` samples where
    stated; a fit from fewer than 3 samples has none and is inconclusive).

    Parameters
    ----------
    quantity : str
        What is compared.
    predicted : float or None
        The predicted exponent.
    fit : dict
        ``value`` (or ``exponent``), ``ci`` and ``n``.
    rule : str
        The rule.
    tol : float
        The tolerance.
    note : str
        A note.
    alternative : float, optional
        The alternative.

    Returns
    -------
    Comparison
        The row.
    """
    value = fit.get("value", fit.get("exponent"))
    ci = fit.get("ci") or [None, None]
    few = fit.get("n") is not None and fit["n"] < MIN_SAMPLES
    return Comparison(quantity, predicted, value, None if few else tuple(ci), rule=rule, tol=tol, note=note,
                      alternative=alternative, n=fit.get("n"))


#: Allowance on fitted exponents (finite ranges of L, m, N bend log–log slopes).
SLOPE_TOL = 0.1
