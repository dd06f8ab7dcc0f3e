"""The expected interaction energy, exactly (SPEC §8), and its true long-time rate beside Theorem 1.4's bound.

Without attention the noise does not interact, so every pair (i, j) of N tokens has the overlap
law of [`PairDiffusion`][stochformer.theory.pair.PairDiffusion], and for every N

$$
E\\,E_β(μ^N_t) = \\frac{1}{2N^2}\\sum_{i≠j} \\bigl(e^β − E\\,e^{βZ^{ij}_t}\\bigr)
= \\frac{N−1}{2N}\\,E\\bigl[e^β − e^{βZ_t}\\bigr],
$$

with E[e^β − e^{βZ_t}] = ∫ u(t, z) ρ₀(dz), u the solution of the backward equation ∂_t u = L u,
u(0, z) = e^β − e^{βz} ([`expectation`][stochformer.theory.evolution.expectation]). With attention the
pair law is exact only for N = 2.

The long-time rate ([`energy_decay_rate`][stochformer.theory.energy.energy_decay_rate]) is the rate of e^{tL} on h(z) = e^β − e^{βz} (less
its limit): the largest of (docs/theory.md) the top eigenvalue of L with the attracting ends
killing, the top of the continuous spectrum −λ²/(2c) of each natural end (exponent λ, c = κ(1) +
κ'(1)), and, at an attracting end where λ ≤ −2c (h, linear at the end, is then not square
integrable for the speed measure), the end's first-moment rate 2λ + 2c (λ̄ − 2v at z = 1).
Theorem 1.4's λ̄' = sup (L h)/h bounds it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Annotated, Optional, Sequence

import numpy as np

from ..model.kernel import NoiseKernel, lambda_bar_prime
from ..core.validation import EnergyBeta, Int, NonNegativeFloat, validated
from .evolution import CELL_WIDTH, CellWidth, PairChain, Times, expectation, richardson
from .pair import PairDiffusion


def energy_factor(pair: PairDiffusion, times: Times, energy_beta: float, z0: Optional[float] = None,
                  h: CellWidth = CELL_WIDTH) -> np.ndarray:
    """E[e^β − e^{βZ_t}] at ``times`` (Z_0 = z0, or the overlap of independent uniform tokens).

    Parameters
    ----------
    pair : PairDiffusion
        The diffusion of the overlap z.
    times : float or sequence of float
        Times >= 0, increasing.
    energy_beta : float
        The energy's β.
    z0 : float, optional
        The starting cosine (None: uniform tokens).
    h : float, optional
        The chain's cell width.

    Returns
    -------
    numpy.ndarray, shape (len(times),)
        The expected gap to e^β.
    """
    beta = energy_beta

    def gap(w: np.ndarray, y: np.ndarray) -> np.ndarray:  # e^β − e^{βz} = −e^β expm1(−β(1 − z))
        return -math.exp(beta) * np.expm1(-beta * w)

    return expectation(pair, gap, times, z0=z0, h=h, distances=True)


@validated
def expected_energy(pair: PairDiffusion, times: Times, N: Annotated[int, Int(2)] = 2,
                    energy_beta: EnergyBeta = 1.0, z0: Optional[float] = None, h: CellWidth = CELL_WIDTH) -> np.ndarray:
    r"""The expected interaction energy of N tokens without attention, exactly (SPEC §8):

    $$
    \mathbb E\big[E_\beta(\mu^N_t)\big] = \frac{N-1}{2N}\,\mathbb E\big[e^{\beta} - e^{\beta Z_t}\big],
    $$

    Z the pair overlap of ``pair``, every pair starting at cosine ``z0``, or (z0 None) from N
    independent uniform tokens on $S^{d-1}$ (the pair overlap then has density
    $\propto (1 - z^2)^{(d-3)/2}$).

    Parameters
    ----------
    pair : PairDiffusion
        The pair diffusion ([`PairDiffusion`][stochformer.theory.pair.PairDiffusion]).
    times : sequence of float
        The times t >= 0.
    N : int, optional
        The number of tokens, >= 2; with attention (``pair.v`` ≠ 0) only N = 2 is exact.
    energy_beta : float, optional
        The energy's β, in (0, 700].
    z0 : float, optional
        The start cosine of every pair, in (−1, 1); None: uniform tokens.
    h : float, optional
        The cell width of the birth–death chain (docs/theory.md).

    Returns
    -------
    numpy.ndarray, shape (len(times),)
        $\mathbb E[E_\beta(\mu^N_t)]$ at each time.

    Raises
    ------
    ValueError
        An argument out of range, or N > 2 with attention, naming the argument.

    Examples
    --------
    >>> from stochformer import NoiseKernel
    >>> from stochformer.theory import PairDiffusion, expected_energy
    >>> pair = PairDiffusion(NoiseKernel("relu", 8, 0.5, 0.5))
    >>> expected_energy(pair, [0.0, 1.0], N=64).round(4)
    array([0.8142, 0.1396])
    """
    if pair.v != 0 and N != 2:
        raise ValueError(f"N: with attention (v = {pair.v:g}) the pair law gives the energy of N = 2 tokens only "
                         f"(got N = {N})")
    return (N - 1) / (2 * N) * energy_factor(pair, times, energy_beta, z0, h)


@dataclass(frozen=True)
class EnergyRate:
    """The long-time rate of E[E_β(μ_t)] (of its distance to its limit) and what sets it.

    ``kind``: 'eigenvalue' (an eigenvalue of L above its continuous spectrum), 'edge' (the top of the
    continuous spectrum of a natural end), 'boundary' (the first-moment rate of an attracting end);
    ``eigenvalue``: the top eigenvalue of L, ends attracting killed (Richardson on the chain);
    ``edge``, ``boundary``: −inf where none; ``lambda_bar``: SPEC §5's λ̄ (− 2v with attention),
    ``lambda_bar_prime``: Theorem 1.4's bound ε + λ̄' (energy β; ε = max(0, −2v), NaN when the attention's β
    is not the energy's), ``gap`` = bound − rate.

    Attributes
    ----------
    rate : float
        The long-time rate.
    kind : {"eigenvalue", "edge", "boundary"}
        What sets it.
    eigenvalue, edge, boundary : float
        The three candidates (−inf where none).
    lambda_bar, lambda_bar_prime : float
        λ̄ and Theorem 1.4's bound.
    gap : float
        Bound − rate.
    """

    rate: float
    kind: str
    eigenvalue: float
    edge: float
    boundary: float
    lambda_bar: float
    lambda_bar_prime: float
    gap: float

    def to_dict(self) -> dict:
        """The fields as a dict.

        Returns
        -------
        dict
            Field name → value.
        """
        return asdict(self)


def _top_eigenvalue(pair: PairDiffusion, h: float) -> float:
    kill_left, kill_right = pair.antipode.attracting, pair.diagonal.attracting
    recurrent = not (kill_left or kill_right)

    def one(width: float) -> float:
        vals = PairChain(pair, width).top_eigenvalues(kill_left, kill_right, k=2)
        return float(vals[1] if recurrent else vals[0])  # the constants (eigenvalue 0) skipped

    return float(richardson([one(h), one(h / 2)]))


@validated
def energy_decay_rate(pair: PairDiffusion, energy_beta: EnergyBeta = 1.0, h: CellWidth = CELL_WIDTH) -> EnergyRate:
    r"""The true long-time decay rate of the expected energy, beside λ̄ and Theorem 1.4's bound λ̄':

    $$
    r = \lim_{t\to\infty} \frac1t \log\Big|\,\mathbb E\big[e^\beta - e^{\beta Z_t}\big] - \text{its limit}\Big|,
    $$

    for a start inside (−1, 1): the largest of the three candidates of docs/theory.md (the top
    eigenvalue of the generator, the edge of a natural end's continuous spectrum, an attracting
    end's first-moment rate; module docstring).

    Parameters
    ----------
    pair : PairDiffusion
        The pair diffusion ([`PairDiffusion`][stochformer.theory.pair.PairDiffusion]).
    energy_beta : float, optional
        The energy's β, in (0, 700].
    h : float, optional
        The cell width of the birth–death chain.

    Returns
    -------
    EnergyRate
        ``rate`` and its ``kind``, the candidates ``eigenvalue``, ``edge``, ``boundary``, and
        ``lambda_bar``, ``lambda_bar_prime`` and the ``gap`` between the bound and the rate
        ([`EnergyRate`][stochformer.theory.energy.EnergyRate]).

    Examples
    --------
    >>> from stochformer import NoiseKernel
    >>> from stochformer.theory import PairDiffusion, energy_decay_rate
    >>> rate = energy_decay_rate(PairDiffusion(NoiseKernel("relu", 8, 0.5, 0.5)))
    >>> rate.kind, rate.rate, rate.rate <= rate.lambda_bar_prime
    ('boundary', -1.75, True)
    """
    c = pair.c
    edges, boundaries = [], []
    for end in (pair.diagonal, pair.antipode):
        if end.exponent is None:
            continue
        edges.append(-end.exponent ** 2 / (2 * c))
        if end.attracting and end.exponent <= -2 * c:
            boundaries.append(2 * end.exponent + 2 * c)
    edge = max(edges, default=-math.inf)
    boundary = max(boundaries, default=-math.inf)
    eig = _top_eigenvalue(pair, h)
    candidates = {"eigenvalue": eig if eig > edge else -math.inf, "edge": edge, "boundary": boundary}
    kind = max(candidates, key=lambda k: candidates[k])
    rate = candidates[kind]
    # Theorem 1.4: rate ≤ ε + λ̄', Assumption 2's ε = max(0, −2v) for Qᵀ K = βI, V = vI with β the energy's β
    if pair.v == 0 or pair.beta == energy_beta:
        bound = lambda_bar_prime(pair.kernel, energy_beta) + max(0.0, -2 * pair.v)
    else:
        bound = math.nan
    return EnergyRate(rate, kind, eig, edge, boundary, pair.lambda_bar - 2 * pair.v, bound, bound - rate)


@validated
def energy_rate_table(activations: Sequence[str] = ("relu", "tanh", "silu", "sigmoid"), ds: Sequence[int] = (5, 64, 128),
                      sigma: NonNegativeFloat = 0.1, energy_beta: EnergyBeta = 1.0, h: CellWidth = CELL_WIDTH) -> list[dict]:
    """One row per activation and d (no attention, σ_U = σ_W = ``sigma``): κ(1), κ'(1), λ₁, λ̄, the
    true rate of E[E_β] ([`energy_decay_rate`][stochformer.theory.energy.energy_decay_rate]), what sets it, Theorem 1.4's bound λ̄' and the gap
    λ̄' − rate (how loose the bound is).

    Parameters
    ----------
    activations : sequence of str
        Activation names.
    ds : sequence of int
        Token dimensions.
    sigma : float, optional
        σ_U = σ_W, >= 0.
    energy_beta : float, optional
        The energy's β.
    h : float, optional
        The chain's cell width.

    Returns
    -------
    list of dict
        One row per (activation, d).
    """
    rows = []
    for act in activations:
        for d in ds:
            pair = PairDiffusion(NoiseKernel(act, d, sigma, sigma), 1.0, 0.0)
            r = energy_decay_rate(pair, energy_beta, h)
            rows.append({"activation": act, "d": d, "sigma": sigma, "kappa": pair.kappa1, "kappa_prime": pair.kappa1_prime,
                         "lambda_1": pair.lambda_1, "lambda_bar": r.lambda_bar, "rate": r.rate, "kind": r.kind,
                         "lambda_bar_prime": r.lambda_bar_prime, "gap": r.gap, "odd": pair.odd})
    return rows
