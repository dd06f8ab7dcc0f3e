r"""Homogenized transformers (Koubbi, Geshkovski, Rigollet, arXiv:2604.01978): multi-head attention
whose weights are redrawn in every layer and every head, as a noise source for
[`LimitSDE`][stochformer.model.sde.LimitSDE].

One layer of the discrete model (tokens on the sphere, post-LN, H heads, residual step η):

$$
x_i \leftarrow \mathrm{LN}\Big(x_i + \sqrt{\eta/H}\,\sum_{h=1}^{H} V_h\, a^h_i\Big), \qquad
a^h_i = \sum_j \operatorname{softmax}_j\big(\beta\,\langle A_h x_i, x_j\rangle\big)\,x_j, \qquad
A_h = W_h W_h'^{\top},
$$

$V_h$ (d × d) with i.i.d. N(0, σ_V²) entries, $W_h, W_h'$ (d × d) with i.i.d. N(0, σ_A²) entries
(``tied``: $W' = W$, so that $A_h$ is positive semi-definite and $\langle A x_i, x_i\rangle \approx d\sigma_A^2$:
the effective inverse temperature is β_eff = β d σ_A²), all fresh in every layer and head. The
reading of the step (choice, docs/neighbours.md): a layer adds the covariance η σ_V² per unit of
layer time t = ℓη, so that the per-head, per-layer squared tangent displacement is
α = (η/H) σ_V² (d − 1) (for |a| = 1).

The weights have mean zero, so the layer is pure noise: as η → 0 the tokens follow the limit SDE
of SPEC §3 with a *common, Gram-dependent* Gaussian increment,

$$
E[dW_i\,dW_j^\top] = \Gamma_{ij}(X)\,I\,dt, \qquad \Gamma_{ij}(X) = \sigma_V^2\,E_A\big[\langle a_i, a_j\rangle\big],
$$

the Itô correction $-\tfrac12 (d-1)\Gamma_{ii}\,x_i$ coming from LN. Two limits (docs/neighbours.md):
β = 0 gives $a_i = \bar x$ for every i, $\Gamma_{ij} = \sigma_V^2 |\bar x|^2$; β_eff → ∞ (tied, d large)
gives $a_i = x_i$, $\Gamma_{ij} = \sigma_V^2\langle x_i, x_j\rangle$: the linear kernel κ(u) = σ_V² u
(u/d for σ_V² = 1/d).

Sampling (exact in law, per layer): given X the logits depend on $W$ only through $XW$, whose
columns are i.i.d. N(0, σ_A² XXᵀ), so $XW = \sigma_A R\,\Xi$ with $R = (XX^\top)^{1/2}$ and Ξ (N × d)
standard; the logits $\beta\sigma_A^2 R\,\Xi\Xi^\top R$ need only the Wishart matrix ΞΞᵀ, drawn by its
Bartlett factor (N(N + 1)/2 numbers; untied: ΞΞ′ᵀ = L Z, Z (N × N) standard). The output
$(V a_i)_i$ depends on V only through its columns, i.i.d. N(0, σ_V² G_a) with
$G_a = (\langle a_i, a_j\rangle)_{ij}$, drawn through the symmetric root
([`sqrt_psd`][stochformer.model.noise.sqrt_psd]): N·d normals per head instead of 2d² + d².
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from ..core.brownian import as_draws
from ..core.sphere import normalize
from ..core.validation import Bool, NonNegativeFloat, PositiveFloat, PositiveInt, validated
from .kernel import NoiseKernel
from .noise import Randomness, gamma_variates, sqrt_psd


@validated
@dataclass
class HomogenizedAttention:
    r"""The layer noise of a homogenized transformer (module docstring): at the tokens X,

    $$
    \Delta W_i = \sqrt{dt/H}\;\sum_{h=1}^{H} V_h\,a^h_i,
    $$

    $a^h_i$ the softmax attention output of head h with the random $A_h = W_h W_h'^\top$. The V part
    is the step's Brownian normals (batch, H, N, d) from
    [`Draws.brownian`][stochformer.core.brownian.Draws.brownian] (a
    [`BrownianPath`][stochformer.core.brownian.BrownianPath] of that shape couples runs); the W part
    comes from the step's generator (weights outside the path). The discrete layers themselves,
    x ← LN(x + ΔW) with dt = η, are [`HomogenizedLayers`][stochformer.model.homogenized.HomogenizedLayers];
    in a [`LimitSDE`][stochformer.model.sde.LimitSDE], the
    [`EulerMaruyama`][stochformer.model.sde.EulerMaruyama] integrator (which projects ΔW and scales x
    by its Itô term before LN) and the default Heun integrator (the increment evaluated once, at X)
    are schemes of the same limit.

    Parameters
    ----------
    beta : float, optional
        The inverse temperature β >= 0 (0: uniform attention, $a_i = \bar x$).
    heads : int, optional
        H >= 1.
    sigma_V : float, optional
        σ_V > 0, the std of the value entries.
    sigma_A : float, optional
        σ_A > 0, the std of the entries of W, W′; None (default): 1/√d, so that β_eff = β d σ_A² = β.
    tied : bool, optional
        W′ = W (default), A positive semi-definite; False: W′ independent of W.

    Examples
    --------
    >>> import stochformer as sf
    >>> from stochformer.model.homogenized import HomogenizedAttention
    >>> sde = sf.LimitSDE(noise=HomogenizedAttention(beta=2.0, heads=4, sigma_V=0.5))
    >>> X0 = sf.sphere.uniform(batch=2, N=3, d=4, seed=0)
    >>> sf.solve(sde, X0, T=1.0, steps=10, seed=0).X_final.shape
    (2, 3, 4)
    >>> HomogenizedAttention(sigma_V=0.5).noise_kernel(4).kappa1     # σ_V²: the one-point speed at |a| = 1
    0.25
    """

    beta: NonNegativeFloat = 1.0
    heads: PositiveInt = 1
    sigma_V: PositiveFloat = 1.0
    sigma_A: Optional[PositiveFloat] = None
    tied: Bool = True

    def reset(self, batch, d, generator, dtype, device) -> None:  # stateless: weights are fresh in every layer
        """Start a run: the heads are drawn fresh at every step, nothing lives across steps.

        Parameters
        ----------
        batch : int
            Independent samples of the run.
        d : int
            Token dimension.
        generator : torch.Generator
            The run's generator.
        dtype : torch.dtype
            The tokens' dtype.
        device : str or torch.device
            The tokens' device.
        """
        pass

    def noise_kernel(self, d: int) -> NoiseKernel:
        """The linear kernel κ(u) = σ_V² u (linear φ, s = σ_V √d): the field of the large-β limit
        (a_i = x_i), whose κ(1) = σ_V² is the one-point speed where |a_i| = 1 (it enters only the
        Euler integrator's radial term).

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        return NoiseKernel("linear", d, scale=self.sigma_V * math.sqrt(d))

    def effective_beta(self, d: int) -> float:
        """β_eff = β d σ_A² (β for the default σ_A = 1/√d).

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        float
            β_eff.
        """
        s2 = 1.0 / d if self.sigma_A is None else self.sigma_A**2
        return self.beta * d * s2

    def outputs(self, X: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The attention outputs a^h_i of H freshly drawn heads: X (batch, N, d) → (batch, H, N, d).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        generator : torch.Generator
            Draws the heads.

        Returns
        -------
        torch.Tensor, shape (batch, H, N, d)
            The outputs a^h_i.
        """
        B, N, d = X.shape
        if self.beta == 0.0:
            return X.mean(dim=1, keepdim=True).unsqueeze(1).expand(B, self.heads, N, d)
        return self.weights(X @ X.transpose(-1, -2), d, generator) @ X.unsqueeze(1)

    def weights(self, G: torch.Tensor, d: int, generator: torch.Generator,
                root: Optional[torch.Tensor] = None) -> torch.Tensor:
        r"""The attention weights $w^h_{ij} = \operatorname{softmax}_j(\beta\langle A_h x_i, x_j\rangle)$ of H
        freshly drawn heads, from the tokens' Gram matrix alone: G (batch, N, N) → (batch, H, N, N).

        Given X, the logits depend on W only through XW, whose columns are i.i.d. N(0, σ_A² G)
        (module docstring), so they are drawn from G and d without the tokens.

        Parameters
        ----------
        G : torch.Tensor, shape (batch, N, N)
            The Gram matrix ⟨x_i, x_j⟩ of unit tokens.
        d : int
            Token dimension.
        generator : torch.Generator
            Draws the heads (nothing is drawn at β = 0).
        root : torch.Tensor, shape (batch, N, N), optional
            A symmetric root of G, if the caller holds one (default: [`sqrt_psd`][stochformer.model.noise.sqrt_psd]).

        Returns
        -------
        torch.Tensor, shape (batch, H, N, N)
            w^h_ij, rows summing to 1.
        """
        B, N, _ = G.shape
        if self.beta == 0.0:
            return G.new_full((B, self.heads, N, N), 1.0 / N)
        s_A = 1.0 / math.sqrt(d) if self.sigma_A is None else self.sigma_A
        R = (sqrt_psd(G) if root is None else root).unsqueeze(1)  # (B, 1, N, N): XW = σ_A R Ξ in law
        L = _gram_factor((B, self.heads, N), d, generator, G)  # Ξ Ξᵀ = L Lᵀ in law
        if self.tied:
            inner = L @ L.transpose(-1, -2)
        else:  # Ξ Ξ′ᵀ = L Z in law (its columns Ξ ξ′_j are N(0, Ξ Ξᵀ) given Ξ)
            inner = L @ torch.randn(B, self.heads, N, N, generator=generator, dtype=G.dtype, device=G.device)
        logits = (self.beta * s_A**2) * (R @ inner @ R)  # β x_jᵀ A x_i (the roles of i, j: equal in law)
        return torch.softmax(logits, dim=-1)

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """√(dt/H) σ_V Σ_h G_h^{1/2} Ξ_h, G_h = a^h a^hᵀ: X (batch, N, d) → (batch, N, d).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        dt : float
            The step.
        draws : torch.Generator or Draws
            The step's randomness.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            ΔW at the tokens.
        """
        draws = as_draws(draws)
        B, N, d = X.shape
        a = self.outputs(X, draws.generator)
        xi = draws.brownian((B, self.heads, N, d), X.dtype, X.device)
        out = sqrt_psd(a @ a.transpose(-1, -2)) @ xi
        return (self.sigma_V * math.sqrt(dt / self.heads)) * out.sum(dim=1)


@dataclass
class HomogenizedLayers:
    r"""The discrete homogenized transformer itself, one layer per step of [`solve`][stochformer.solve]
    (dt = η):

    $$
    x_i \leftarrow \mathrm{LN}\big(x_i + \Delta W_i\big), \qquad \Delta W_i = \sqrt{\eta/H}\,\sum_h V_h a^h_i
    $$

    (``attention``'s [`increment`][stochformer.model.homogenized.HomogenizedAttention.increment],
    exact in law), with neither a tangent projection nor an Itô term: the layer of the module
    docstring, whose weak error against the limit SDE is what a sweep over η measures
    (docs/neighbours.md). [`EulerMaruyama`][stochformer.model.sde.EulerMaruyama] with dt = η is a
    different scheme of the same limit: it projects ΔW to the tangent space and scales x by
    1 − κ(1)(d − 1)η/2 before LN.

    Parameters
    ----------
    attention : HomogenizedAttention
        The random heads of every layer.

    Examples
    --------
    >>> import stochformer as sf
    >>> from stochformer.model.homogenized import HomogenizedAttention, HomogenizedLayers
    >>> X0 = sf.sphere.uniform(batch=2, N=3, d=4, seed=0)
    >>> sf.solve(HomogenizedLayers(HomogenizedAttention(beta=2.0)), X0, T=0.5, steps=5, seed=0).X_final.shape
    (2, 3, 4)
    """

    attention: HomogenizedAttention

    def reset(self, batch, d, generator, dtype, device) -> None:
        """Start a run: ``attention``'s reset (stateless: the heads are fresh in every layer).

        Parameters
        ----------
        batch : int
            Independent samples of the run.
        d : int
            Token dimension.
        generator : torch.Generator
            The run's generator.
        dtype : torch.dtype
            The tokens' dtype.
        device : str or torch.device
            The tokens' device.
        """
        self.attention.reset(batch, d, generator, dtype, device)

    def step(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """One layer at η = dt: X (batch, N, d) → (batch, N, d), unit rows.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens, unit rows.
        dt : float
            The residual step η.
        draws : torch.Generator or Draws
            The step's randomness.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            The tokens after the layer, unit rows.
        """
        return normalize(X + self.attention.increment(X, dt, draws))

    def gram_step(self, G: torch.Tensor, dt: float, d: int, generator: torch.Generator) -> torch.Tensor:
        r"""One layer at η = dt acting on the tokens' Gram matrix alone, exact in law: G (batch, N, N) →
        (batch, N, N), the Gram matrix of the tokens after [`step`][stochformer.model.homogenized.HomogenizedLayers.step].

        The layer is invariant under rotations of $\mathbb{R}^d$, so the Gram matrix is a Markov chain
        of its own, and O(H²N³) numbers per layer draw it whatever d (the tokens would need N·d per
        head). Write $X = C E^\top$ with $C = G^{1/2}$ and E (d × N) orthonormal; given the weights
        $\Omega_h$ ([`weights`][stochformer.model.homogenized.HomogenizedAttention.weights]),
        $\Delta W = c\sum_h \Omega_h C Z_h$ in law, $c = \sigma_V\sqrt{\eta/H}$, $Z_h$ (N × d) standard.
        Split each $Z_h$ along E ($T_h$, N × N, standard) and its complement ($Z_h^\perp$, N × (d − N));
        then $X\Delta W^\top = C\,(c\sum_h \Omega_h C T_h)^\top$ and
        $\Delta W\Delta W^\top = D D^\top + c^2 P\,(Z^\perp Z^{\perp\top}) P^\top$, with
        $D = c\sum_h \Omega_h C T_h$, $P = [\Omega_1 C, \dots, \Omega_H C]$ (N × HN) and
        $Z^\perp Z^{\perp\top}$ ~ Wishart_{HN}(d − N, I), drawn by its Bartlett factor. LN divides
        $M = G + X\Delta W^\top + \Delta W X^\top + \Delta W\Delta W^\top$ by the norms:
        $G'_{ij} = M_{ij}/\sqrt{M_{ii}M_{jj}}$.

        Parameters
        ----------
        G : torch.Tensor, shape (batch, N, N)
            The Gram matrix of unit tokens, N <= d.
        dt : float
            The residual step η.
        d : int
            Token dimension, >= N.
        generator : torch.Generator
            The layer's randomness.

        Returns
        -------
        torch.Tensor, shape (batch, N, N)
            The Gram matrix after the layer, unit diagonal.
        """
        B, N, _ = G.shape
        if d < N:
            raise ValueError(f"d: the Gram chain needs d >= N = {N} (got {d})")
        att = self.attention
        H = att.heads
        C = _symmetric_root(G)  # X = C Eᵀ
        w = att.weights(G, d, generator, root=C)
        C = C.unsqueeze(1)
        P = w @ C  # (B, H, N, N): Ω_h C
        T = torch.randn(B, H, N, N, generator=generator, dtype=G.dtype, device=G.device)
        c = att.sigma_V * math.sqrt(dt / H)
        D = c * (P @ T).sum(dim=1)  # ΔW E, (B, N, N)
        Lp = _gram_factor((B, H * N), d - N, generator, G)  # Z⊥ Z⊥ᵀ = Lp Lpᵀ in law
        Q = c * (P.transpose(1, 2).reshape(B, N, H * N) @ Lp)  # (B, N, ·): P Lp
        cross = C[:, 0] @ D.transpose(-1, -2)  # X ΔWᵀ
        M = G + cross + cross.transpose(-1, -2) + D @ D.transpose(-1, -2) + Q @ Q.transpose(-1, -2)
        n = M.diagonal(dim1=-2, dim2=-1).sqrt()
        return M / (n.unsqueeze(-1) * n.unsqueeze(-2))


def _symmetric_root(G: torch.Tensor) -> torch.Tensor:
    """G^{1/2} of PSD matrices (..., N, N): for N = 2 in closed form, √G = (G + √det G I)/√(tr G + 2√det G)
    (Cayley–Hamilton: no eigen-solver in the chain's loop), else [`sqrt_psd`][stochformer.model.noise.sqrt_psd]
    (which stays the root of the token-level paths, so their numbers do not change)."""
    if G.shape[-1] != 2:
        return sqrt_psd(G)
    det = (G[..., 0, 0] * G[..., 1, 1] - G[..., 0, 1] * G[..., 1, 0]).clamp_min(0).sqrt()
    scale = (G[..., 0, 0] + G[..., 1, 1] + 2.0 * det).rsqrt()
    eye = torch.eye(2, dtype=G.dtype, device=G.device)
    return (G + det[..., None, None] * eye) * scale[..., None, None]


def _gram_factor(lead: tuple[int, ...], d: int, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """A factor L (lead + (N, N)) with L Lᵀ equal in law to Ξ Ξᵀ, Ξ (N, d) standard normal: the
    Bartlett decomposition of Wishart_N(d, I) (L lower triangular, L_ii² ~ χ²_{d−i}, i = 0..N−1,
    below the diagonal N(0, 1)) for d >= N + 1, else Ξ itself (N × d, also a factor)."""
    *rest, N = lead
    if d < N + 1:
        return torch.randn(*lead, d, generator=generator, dtype=like.dtype, device=like.device)
    L = torch.randn(*lead, N, generator=generator, dtype=like.dtype, device=like.device).tril(-1)
    n = math.prod(rest)
    for i in range(N):  # χ²_k = 2 Gamma(k/2), k = d − i >= 2
        L[..., i, i] = (2.0 * gamma_variates((d - i) / 2.0, (n,), generator, like)).sqrt().view(*rest)
    return L
