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

`cluster_spectrum` measures it by Benettin's method on the model's own layer, differentiated
by ``torch.func.jvp`` along an orthonormal frame of the N(d − 1)-dimensional tangent space,
with the MLP's explicit weights drawn per layer ([`MLPJet`][stochformer.model.tangent.MLPJet],
``mode="weights"``), and, on the same draws, the one-token spectrum at the cluster's centre: the
prediction is checked sample by sample, not only in law.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from ..core.brownian import Draws
from ..core.runtime import make_generator
from ..core.sphere import normalize, tangent, uniform
from ..core.validation import PositiveFloat, PositiveInt, Seed, validated
from ..model.attention import start_run
from ..model.tangent import MLPJet, autodiff_tangent, frame_state, reorthonormalise, step_map, tangent_frame
from ..model.transformer import Transformer


class ClusterSpectrum(NamedTuple):
    """Per-sample finite-time exponents (1/T Σ log R_ii): ``tokens`` (batch, N, d − 1) of the N-token
    system, block a = 0 the consensus mode and a ≥ 1 the relative modes (the frame's column order,
    `cluster_spectrum`); ``centre`` (batch, d − 1) of one token at the cluster's centre on the
    same draws; ``shift`` the predicted shift c = −log(1 + γΔt)/Δt of the relative modes;
    ``spread`` (batch,) the largest distance of a token from the centre at the end.

    Attributes
    ----------
    tokens : torch.Tensor, shape (batch, N, d − 1)
        The N-token system's exponents per block.
    centre : torch.Tensor, shape (batch, d − 1)
        One token's exponents at the centre.
    shift : float
        The predicted shift c of the relative modes.
    spread : torch.Tensor, shape (batch,)
        The cluster's largest distance to its centre at T.
    """

    tokens: torch.Tensor
    centre: torch.Tensor
    shift: float
    spread: torch.Tensor

    def predicted(self, shift: Optional[float] = None) -> torch.Tensor:
        """The prediction from the centre's exponents (batch, N, d − 1): block 0 λ_i, blocks a ≥ 1
        λ_i + c (``shift``, default the model's c).

        Parameters
        ----------
        shift : float, optional
            c (default the model's).

        Returns
        -------
        torch.Tensor, shape (batch, N, d − 1)
            The predicted exponents.
        """
        c = self.shift if shift is None else shift
        N = self.tokens.shape[-2]
        offsets = torch.tensor([0.0] + [c] * (N - 1), dtype=self.centre.dtype).view(1, N, 1)
        return self.centre.unsqueeze(1) + offsets


def _frame(X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """The frame of the N tokens X (batch, N, d) built from the centre's frame V (batch, d, d − 1):
    columns u_a ⊗ v_j for an orthonormal basis u_0 = 1/√N, u_1, …, u_{N−1} of R^N (consensus first,
    then relative modes), projected onto each token's tangent space and orthonormalised in that order:
    (batch, N·d, N(d − 1))."""
    B, N, d = X.shape
    U = torch.linalg.qr(torch.cat([torch.ones(N, 1, dtype=X.dtype), torch.eye(N, dtype=X.dtype)[:, : N - 1]], 1)).Q
    U[:, 0] = U[:, 0].abs()  # (N, N): column a is u_a, u_0 = +1/√N
    cols = torch.einsum("ia,bdj->bajid", U, V).reshape(B, N * (d - 1), N, d)  # column (a, j) at token i: u_a[i] v_j
    cols = tangent(X.unsqueeze(1), cols).reshape(B, N * (d - 1), N * d)
    Q, R = torch.linalg.qr(cols.mT)
    return Q * torch.sign(R.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)


def _renormalise(X: torch.Tensor, W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Benettin's step for N tokens: the propagated frame W (batch, N·d, k) projected onto the tangent
    space at X (batch, N, d) and factored W = QR; returns Q and log|R_ii| (batch, k)."""
    B, N, d = X.shape
    W = tangent(X.unsqueeze(1), W.mT.reshape(B, -1, N, d)).reshape(B, -1, N * d).mT
    Q, R = torch.linalg.qr(W)
    return Q, R.diagonal(dim1=-2, dim2=-1).abs().log()


@validated
def cluster_spectrum(model: Transformer, jet: MLPJet, N: PositiveInt, d: PositiveInt, T: PositiveFloat, steps: PositiveInt,
                     batch: PositiveInt, seed: Seed = 0, spread: PositiveFloat = 1e-6) -> ClusterSpectrum:
    """Benettin's method for N tokens started within ``spread`` of a uniform random point, through
    ``steps`` layers of ``model`` (a `Transformer` whose attention has
    V = γI; its noise source is not used: ``jet``'s explicit weights are, ``mode = "weights"``) with
    Δt = T/steps; ``batch`` independent samples from ``seed``. The attention's γ is read from the
    model (``model.attention.gamma``).

    Parameters
    ----------
    model : Transformer
        The layer (attention V = γI).
    jet : MLPJet
        The noise's jet (explicit weights).
    N : int
        Tokens.
    d : int
        Token dimension.
    T : float
        The horizon.
    steps : int
        Layers.
    batch : int
        Samples.
    seed : int, optional
        The seed.
    spread : float, optional
        The initial cluster's radius.

    Returns
    -------
    ClusterSpectrum
        The exponents and their prediction.
    """
    if N < 2 or d < 2:
        raise ValueError(f"N, d: a cluster needs N >= 2 tokens in d >= 2 (got N = {N}, d = {d})")
    if model.order != "post_ln":
        raise ValueError("model: the split holds layer by layer for order = 'post_ln' (in a parallel layer the attention "
                         "and the noise share one normalisation and the relative modes' shift is not exact)")
    if jet.mode != "weights":
        raise ValueError("jet: the N-token step needs the layer's field itself (an MLPJet of a RandomMLP with mode='weights')")
    gamma = getattr(model.attention, "gamma", None)
    if gamma is None or getattr(model.attention, "V", None) is not None:
        raise ValueError("model: its attention must have V = gamma I (a SoftmaxAttention without a V matrix)")
    dt = T / steps
    if gamma * dt <= -1:
        raise ValueError(f"steps: gamma * dt must be > -1 (got {gamma * dt:g}); take more steps")
    g = make_generator(seed)
    start_run(model.attention, batch, d, g, torch.float64, "cpu")
    x = uniform(batch, 1, d, generator=g)
    X = normalize(x + spread * tangent(x, torch.randn(batch, N, d, generator=g, dtype=x.dtype)))
    S = frame_state(x, tangent_frame(x, generator=g))
    F = _frame(X, S[:, 1:].mT)
    log_tokens = torch.zeros(batch, N * (d - 1), dtype=x.dtype)
    log_centre = torch.zeros(batch, d - 1, dtype=x.dtype)
    for k in range(steps):
        draws = Draws(g, k=k, n=steps)
        centre, V = S[:, :1], S[:, 1:].mT
        field = jet.jet(centre, V, dt, draws).field
        assert field is not None, "an MLPJet with mode='weights' gives the field itself (checked above)"
        f = step_map(model, dt, field)
        xn, JV = autodiff_tangent(f, centre, V)
        S, logs = reorthonormalise(frame_state(xn, JV))
        log_centre += logs
        columns = F.mT.reshape(batch, -1, N, d).transpose(0, 1)  # (k, batch, N, d)
        JF = torch.func.vmap(lambda v: torch.func.jvp(f, (X,), (v,))[1])(columns)
        X = f(X)
        F, logs = _renormalise(X, JF.transpose(0, 1).reshape(batch, -1, N * d).mT)
        log_tokens += logs
    spread_end = torch.linalg.vector_norm(X - S[:, :1], dim=-1).amax(-1)
    return ClusterSpectrum((log_tokens / T).view(batch, N, d - 1), log_centre / T, -math.log1p(gamma * dt) / dt, spread_end)
