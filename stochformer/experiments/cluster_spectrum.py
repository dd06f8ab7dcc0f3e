"""The Lyapunov spectrum of N tokens at a cluster with attention (SPEC §8; docs/spectrum.md,
"N tokens at a cluster").

At consensus (x_i = x for all i) with V = γI the softmax weights are 1/N to first order
(⟨x_i, x_j⟩ = 1 − O(ε²) for tangent perturbations ε_i), so the attention's drift linearises to
P_{x_i} γ Σ_j w_ij x_j ≈ γ(ε̄ − ε_i), and the common noise acts on every ε_i by the same DW(x).
The tangent space of the N-token system splits into the consensus mode (all ε_i equal), on which
the attention does nothing, and the N − 1 relative modes (Σ ε_i = 0), on which it adds −γ; both
carry the one-token tangent flow. The spectrum of the N tokens is therefore

    {λ_i} ∪ {λ_i − γ} (each N − 1 times),   i = 1, …, d − 1,

with λ_i the one-token spectrum. In a transformer layer the attention sublayer
LN(x_i + Δt γ Σ_j w_ij x_j) maps ε_i to (ε_i + γΔt ε̄)/(1 + γΔt) to first order: the consensus
mode is unchanged and the relative modes are divided by 1 + γΔt, a shift per unit time of
c = −log(1 + γΔt)/Δt → −γ. The cluster is stable (its relative modes contract) iff λ₁ + c < 0:
for repulsive attention V = −δI, iff λ₁ < −δ as Δt → 0.

In the limit SDE (SPEC §3, [`LimitSDE`][stochformer.model.sde.LimitSDE] with the exact field's jet
[`ExactJet`][stochformer.model.tangent.ExactJet]) the attention's drift and the noise share one
step, so the split holds as Δt → 0 only: the shift is c = −γ up to O(Δt) (measured and
extrapolated in Δt in docs/spectrum.md). The N tokens there feel the field's 1-jet at the centre,
y ↦ ΔW(x) + DΔW(x)(y − x) ([`affine_field`][stochformer.model.tangent.affine_field]), which is
the exact field to first order in the spread, all the linearisation needs.

`cluster_spectrum` measures it by Benettin's method on the model's own step, differentiated
by ``torch.func.jvp`` along an orthonormal frame of the N·k-dimensional tangent subspace spanned by
u_a ⊗ v_j (a < N, j < k ≤ d − 1; the relative modes are invariant, so k = 1 gives the top exponent
of each block, all the stability criterion needs), with the MLP's explicit weights drawn per layer
([`MLPJet`][stochformer.model.tangent.MLPJet], ``mode="weights"``) or the exact field's jet, and, on
the same draws, the one-token spectrum at the cluster's centre: the prediction is checked sample
by sample, not only in law.

[`cluster_stability`][stochformer.experiments.cluster_spectrum.cluster_stability] applies it to the
stability criterion λ₁ < −δ of a cluster under V = −δI at a given setting (activation, d, σ).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, NamedTuple, Optional, Sequence, Union

import torch

from ..core.brownian import Draws
from ..core.runtime import make_generator
from ..core.sphere import normalize, tangent, uniform
from ..core.validation import FiniteFloat, Int, NonNegativeFloat, PositiveFloat, PositiveInt, Seed, validated
from ..measure.stats import mean_and_se
from ..measure.verdict import Comparison, judge, quantile
from ..model.attention import SoftmaxAttention, start_run
from ..model.kernel import NoiseKernel, lyapunov_exponent
from ..model.sde import LimitSDE, StratonovichHeun
from ..model.tangent import (ExactJet, FieldJet, MLPJet, affine_field, closed_form_tangent, frame_state, reorthonormalise, step_map,
                             tangent_frame)
from ..model.transformer import Transformer

#: the models whose N-token step `cluster_spectrum` differentiates
ClusterModel = Union[Transformer, LimitSDE]


class ClusterSpectrum(NamedTuple):
    """Per-sample finite-time exponents (1/T Σ log R_ii): ``tokens`` (batch, N, k) of the N-token
    system, block a = 0 the consensus mode and a ≥ 1 the relative modes (the frame's column order,
    `cluster_spectrum`); ``centre`` (batch, d − 1) of one token at the cluster's centre on the
    same draws; ``shift`` the predicted shift of the relative modes (the transformer's
    c = −log(1 + γΔt)/Δt, the SDE's −γ); ``spread`` and ``spread_start`` (batch,) the largest distance
    of a token from the centre at the end and at the start.

    Attributes
    ----------
    tokens : torch.Tensor, shape (batch, N, k)
        The N-token system's exponents per block.
    centre : torch.Tensor, shape (batch, d − 1)
        One token's exponents at the centre.
    shift : float
        The predicted shift of the relative modes.
    spread, spread_start : torch.Tensor, shape (batch,)
        The cluster's largest distance to its centre at T and at the start.
    """

    tokens: torch.Tensor
    centre: torch.Tensor
    shift: float
    spread: torch.Tensor
    spread_start: torch.Tensor

    def predicted(self, shift: Optional[float] = None) -> torch.Tensor:
        """The prediction from the centre's exponents (batch, N, k): block 0 λ_i, blocks a ≥ 1
        λ_i + c (``shift``, default the model's c), i ≤ k.

        Parameters
        ----------
        shift : float, optional
            c (default the model's).

        Returns
        -------
        torch.Tensor, shape (batch, N, k)
            The predicted exponents.
        """
        c = self.shift if shift is None else shift
        N, k = self.tokens.shape[-2:]
        offsets = torch.tensor([0.0] + [c] * (N - 1), dtype=self.centre.dtype).view(1, N, 1)
        return self.centre[:, :k].unsqueeze(1) + offsets

    def relative_gap(self) -> torch.Tensor:
        """The measured shift per sample: the mean over the relative blocks and the frame of
        tokens − centre (the prediction: ``shift``).

        Returns
        -------
        torch.Tensor, shape (batch,)
            The shift measured in each sample.
        """
        k = self.tokens.shape[-1]
        return (self.tokens[:, 1:] - self.centre[:, None, :k]).mean((-1, -2))


def _frame(X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """The frame of the N tokens X (batch, N, d) built from the centre's frame V (batch, d, k):
    columns u_a ⊗ v_j for an orthonormal basis u_0 = 1/√N, u_1, …, u_{N−1} of R^N (consensus first,
    then relative modes), projected onto each token's tangent space and orthonormalised in that order:
    (batch, N·d, N·k)."""
    B, N, d = X.shape
    k = V.shape[-1]
    U = torch.linalg.qr(torch.cat([torch.ones(N, 1, dtype=X.dtype), torch.eye(N, dtype=X.dtype)[:, : N - 1]], 1)).Q
    U[:, 0] = U[:, 0].abs()  # (N, N): column a is u_a, u_0 = +1/√N
    cols = torch.einsum("ia,bdj->bajid", U, V).reshape(B, N * k, N, d)  # column (a, j) at token i: u_a[i] v_j
    cols = tangent(X.unsqueeze(1), cols).reshape(B, N * k, N * d)
    Q, R = torch.linalg.qr(cols.mT)
    return Q * torch.sign(R.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)


def _renormalise(X: torch.Tensor, W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Benettin's step for N tokens: the propagated frame W (batch, N·d, k) projected onto the tangent
    space at X (batch, N, d) and factored W = QR; returns Q and log|R_ii| (batch, k)."""
    B, N, d = X.shape
    W = tangent(X.unsqueeze(1), W.mT.reshape(B, -1, N, d)).reshape(B, -1, N * d).mT
    Q, R = torch.linalg.qr(W)
    return Q, R.diagonal(dim1=-2, dim2=-1).abs().log()


def _check_model(model: ClusterModel, jet: FieldJet) -> float:
    """γ of ``model``'s attention, after the checks that the split applies (``ValueError`` naming the field)."""
    if isinstance(model, Transformer):
        if model.order != "post_ln":
            raise ValueError("model: the split holds layer by layer for order = 'post_ln' (in a parallel layer the attention "
                             "and the noise share one normalisation and the relative modes' shift is not exact)")
        if not isinstance(jet, MLPJet) or jet.mode != "weights":
            raise ValueError("jet: the N-token step needs the layer's field itself (an MLPJet of a RandomMLP with mode='weights')")
    elif not isinstance(jet, ExactJet):
        raise ValueError("jet: the limit SDE's N tokens need the exact field's jet (ExactJet)")
    gamma = getattr(model.attention, "gamma", None)
    if gamma is None or getattr(model.attention, "V", None) is not None:
        raise ValueError("model: its attention must have V = gamma I (a SoftmaxAttention without a V matrix)")
    return float(gamma)


@validated
def cluster_spectrum(model: ClusterModel, jet: FieldJet, N: PositiveInt, d: PositiveInt, T: PositiveFloat, steps: PositiveInt,
                     batch: PositiveInt, seed: Seed = 0, spread: PositiveFloat = 1e-6, k: Optional[PositiveInt] = None
                     ) -> ClusterSpectrum:
    """Benettin's method for N tokens started within ``spread`` of a uniform random point, through
    ``steps`` steps of ``model`` with Δt = T/steps; ``batch`` independent samples from ``seed``.

    Parameters
    ----------
    model : Transformer or LimitSDE
        A post-LN `Transformer` with ``jet`` an `MLPJet` of explicit weights, or a `LimitSDE` with
        ``jet`` an `ExactJet`; its attention a `SoftmaxAttention` with V = γI (γ read from it); its
        own noise source is not used, the jet's is.
    jet : MLPJet or ExactJet
        The source of each step's field.
    N, d : int
        Tokens (≥ 2) and dimension (≥ 2).
    T : float
        Horizon; ``steps`` steps of Δt = T/steps.
    batch : int
        Independent samples; ``seed`` their generator's seed.
    spread : float
        Initial distance of the tokens from the centre (the linearisation's scale).
    k : int, optional
        Frame vectors per mode block, 1 ≤ k ≤ d − 1 (default d − 1: the whole spectrum); the
        centre's frame is always complete (the SDE's affine field needs the whole jet).

    Returns
    -------
    ClusterSpectrum
        ``tokens`` (batch, N, k), ``centre`` (batch, d − 1), ``shift``, ``spread`` and
        ``spread_start`` (batch,).
    """
    if N < 2 or d < 2:
        raise ValueError(f"N, d: a cluster needs N >= 2 tokens in d >= 2 (got N = {N}, d = {d})")
    k = d - 1 if k is None else k
    if k > d - 1:
        raise ValueError(f"k: frame vectors per block must be in 1..d-1 = {d - 1} (got {k})")
    gamma = _check_model(model, jet)
    dt = T / steps
    if gamma * dt <= -1:
        raise ValueError(f"steps: gamma * dt must be > -1 (got {gamma * dt:g}); take more steps")
    g = make_generator(seed)
    model.reset(batch, d, g, torch.float64, "cpu") if isinstance(model, LimitSDE) else start_run(
        model.attention, batch, d, g, torch.float64, "cpu")
    x = uniform(batch, 1, d, generator=g)
    X = normalize(x + spread * tangent(x, torch.randn(batch, N, d, generator=g, dtype=x.dtype)))
    S = frame_state(x, tangent_frame(x, generator=g))
    alone = dataclasses.replace(model, attention=None)
    spread_start = torch.linalg.vector_norm(X - x, dim=-1).amax(-1)
    F = _frame(X, S[:, 1:1 + k].mT)
    log_tokens = torch.zeros(batch, N * k, dtype=x.dtype)
    log_centre = torch.zeros(batch, d - 1, dtype=x.dtype)
    for step in range(steps):
        draws = Draws(g, k=step, n=steps)
        centre, V = S[:, :1], S[:, 1:].mT
        J = jet.jet(centre, V, dt, draws)
        f = step_map(model, dt, J.field or affine_field(centre, V, J.value))
        # one token's attention is its own value, γx, which P_x and LN leave unchanged: the centre's step
        # is the noise's alone, whose tangent map has a closed form
        xn, JV = closed_form_tangent(alone, centre, V, J.value, dt)
        S, logs = reorthonormalise(frame_state(xn, JV))
        log_centre += logs
        columns = F.mT.reshape(batch, -1, N, d).transpose(0, 1)  # (N·k, batch, N, d)
        JF = torch.func.vmap(lambda v: torch.func.jvp(f, (X,), (v,))[1])(columns)
        X = f(X)
        F, logs = _renormalise(X, JF.transpose(0, 1).reshape(batch, -1, N * d).mT)
        log_tokens += logs
    spread_end = torch.linalg.vector_norm(X - S[:, :1], dim=-1).amax(-1)
    shift = -math.log1p(gamma * dt) / dt if isinstance(model, Transformer) else -gamma
    return ClusterSpectrum((log_tokens / T).view(batch, N, k), log_centre / T, shift, spread_end, spread_start)


#: the noise settings of the paper's Figures 2–6 (SPEC §6): (activation, d, σ_U = σ_W)
PAPER_SETTINGS = tuple((a, d, s) for a in ("relu", "silu", "sigmoid", "tanh") for d in (5, 64, 128) for s in (0.0, 0.1))


class ClusterStability(NamedTuple):
    """A cluster of N tokens under repulsive attention V = −δI in the limit SDE at one setting:
    ``lambda_1`` the formula's top exponent of one token (SPEC §5), ``predicted_stable``
    (λ₁ < −δ), ``measured`` the mean over samples of the relative modes' top exponent (prediction
    λ₁ + δ), ``se`` its standard error over ``n`` samples, ``centre`` the measured λ̂₁ of the
    centre, ``contracted`` the fraction of samples whose tokens ended closer to the centre than
    they started.

    Attributes
    ----------
    activation : str
        φ.
    d : int
        Token dimension.
    sigma : float
        σ_U = σ_W.
    delta : float
        The repulsion δ (V = −δI).
    lambda_1 : float
        The formula's λ₁ of one token.
    predicted_stable : bool
        λ₁ < −δ.
    measured, se : float
        The relative modes' top exponent (mean over samples) and its standard error.
    n : int
        Samples.
    centre : float
        The measured λ̂₁ of the centre.
    contracted : float
        The fraction of samples that contracted.
    """

    activation: str
    d: int
    sigma: float
    delta: float
    lambda_1: float
    predicted_stable: bool
    measured: float
    se: float
    n: int
    centre: float
    contracted: float


@validated
def cluster_stability(activation: str, d: Annotated[int, Int(3)], sigma: NonNegativeFloat, delta: PositiveFloat = 1.0,
                      N: Annotated[int, Int(2)] = 4, T: PositiveFloat = 5.0, steps: PositiveInt = 150,
                      batch: Annotated[int, Int(2)] = 16, seed: Seed = 0, beta: FiniteFloat = 1.0,
                      spread: PositiveFloat = 1e-6) -> ClusterStability:
    """The stability criterion λ₁ < −δ (SPEC §8) at one setting: N tokens within ``spread`` of a
    point, attention QᵀK = βI, V = −δI, the limit SDE (Heun, the exact field's jet); the top
    exponent of the relative modes by `cluster_spectrum` with k = 1, predicted λ₁ + δ: the cluster
    contracts iff it is < 0.

    Parameters
    ----------
    activation : str
        The MLP's activation (a name of `stochformer.model.activations`).
    d : int
        Dimension, >= 3.
    sigma : float
        σ_U = σ_W, >= 0.
    delta : float
        δ > 0 of the repulsive attention V = −δI.
    N, T, steps, batch, seed, beta, spread
        Tokens (>= 2), horizon, Heun steps, samples (>= 2), seed, the attention's β, the initial
        distance from the centre.

    Returns
    -------
    ClusterStability
        λ₁ from the formula (SPEC §5), the prediction, and the measured mean and SE over ``batch``
        samples.
    """
    kernel = NoiseKernel(activation, d, sigma_U=sigma, sigma_W=sigma)
    lam1 = lyapunov_exponent(kernel.kappa1, kernel.kappa1_prime, d)
    jet = ExactJet(kernel)
    r = cluster_spectrum(LimitSDE(SoftmaxAttention(beta=beta, gamma=-delta), jet, StratonovichHeun()), jet, N, d, T, steps, batch, seed,
                         spread=spread, k=1)
    mean, se = mean_and_se(r.tokens[:, 1:, 0].mean(-1))
    return ClusterStability(activation, d, sigma, delta, lam1, lam1 < -delta, float(mean), float(se), batch,
                            float(r.centre[:, 0].mean()), float((r.spread < r.spread_start).double().mean()))


def stability_rows(results: Sequence[ClusterStability], predicted_stable: Optional[Sequence[bool]] = None) -> list[Comparison]:
    """One row per setting, judged as one family (Holm; `stochformer.measure.verdict`).

    Parameters
    ----------
    results : sequence of ClusterStability
        The measured settings.
    predicted_stable : sequence of bool, optional
        Replaces the criterion's predictions λ₁ < −δ (to test the rule on a wrong one).

    Returns
    -------
    list of Comparison
        Per setting: the relative modes' top exponent (95% Student's t interval over its samples)
        ``below`` 0 where a stable cluster is predicted, ``above`` 0 where one that spreads.
    """
    stable = [r.predicted_stable for r in results] if predicted_stable is None else list(predicted_stable)
    rows = []
    for r, s in zip(results, stable):
        half = quantile(r.n) * r.se
        rows.append(Comparison(f"cluster's relative exponent, {r.activation} d={r.d} σ={r.sigma:g}, δ={r.delta:g}", 0.0,
                               r.measured, (r.measured - half, r.measured + half), "below" if s else "above", n=r.n,
                               note=f"λ₁ = {r.lambda_1:.4g}: predicted {'stable' if s else 'spreads'}"))
    return judge(rows)
