"""The limit SDE in torchsde's terms, and torchsde's or diffrax's Brownian motions as a
[`BrownianPath`][stochformer.core.brownian.BrownianPath] (SPEC §3).

torchsde integrates ``dy = f(t, y) dt + g(t, y) dB`` on a flat state ``y`` (batch, state) with a
Brownian motion ``B`` (batch, brownian). [`to_torchsde`][stochformer.interop.to_torchsde] writes [`LimitSDE`][stochformer.model.sde.LimitSDE]
so, on ``y = X.reshape(B, N·d)``, in Itô form (SPEC §3):

$$
f(y) = P_{x_i} \\mathrm{Attn}(\\mu, x_i) - \\kappa(1) \\frac{d-1}{2} x_i, \\qquad
g(y)\\, v = P_{x_i} \\big(A(X)\\, V\\big)_i, \\quad V = v \\text{ read as } (m, d),
$$

with the field's coefficient matrix ``A(X)`` (batch, N, m): the exact field's ``K(X)^{1/2}``
(m = N, the same symmetric root as [`ExactField`][stochformer.model.noise.ExactField]), or the
random-feature field's ``s [φ(u_k·x_i/√d + b_k)/√M, σ_W]`` (m = M, plus 1 with σ_W > 0), so that
``g(y) ΔB`` is the project's field increment ``P_X ΔW`` for the normals ``Ξ = ΔB/√Δt``. The
Brownian motion has ``m·d`` channels. The SDE is Itô (``sde_type = "ito"``, ``noise_type =
"general"``): the Stratonovich form of SPEC §3 holds for the field, not for this representation
by a root of K — re-rooting K at another point with the same ``ΔB`` (as torchsde's Stratonovich
schemes do) adds a spurious drift (see [`StratonovichHeun`][stochformer.model.sde.StratonovichHeun]).

torchsde's schemes do not keep ``|x_i| = 1``; [`sdeint_projected`][stochformer.interop.sdeint_projected] takes one torchsde step per
interval and projects each token back to the sphere after it (the project's projected Euler).
[`from_torchsde_brownian`][stochformer.interop.from_torchsde_brownian] reads any Brownian motion's increments on a grid into a
[`BrownianPath`][stochformer.core.brownian.BrownianPath], so that [`stochformer.solve`][stochformer.solve] and torchsde are
driven by the same increments. torchsde is optional (``pip install 'stochformer[interop]'``).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from .core.brownian import BrownianPath
from .core.extras import require
from .core.sphere import normalize, tangent
from .model.noise import ExactField, RandomFeatureField, sqrt_psd
from .model.sde import LimitSDE

__all__ = ["DenseTorchsdeSDE", "GivenPath", "TorchsdeSDE", "from_torchsde_brownian", "sdeint_projected", "to_torchsde"]


class TorchsdeSDE:
    """The limit SDE on flat states ``y`` (batch, N·d) for torchsde (see the module docstring).

    Parameters
    ----------
    sde : LimitSDE
        The limit SDE (its attention and noise source).
    shape : tuple of int
        (batch, N, d) of the tokens.
    field_shape : tuple of int
        (batch, m, d): the Brownian channels of one sample read as m rows of d.

    Attributes
    ----------
    noise_type, sde_type : str
        ``"general"`` and ``"ito"`` (torchsde's contract).
    shape : tuple of int
        (batch, N, d) of the tokens.
    brownian_size : int
        m·d, the channels of the Brownian motion (``field_shape`` flattened).
    field_shape : tuple of int
        (batch, m, d): the Brownian channels of one sample read as m rows of d.
    path_shape : tuple of int, or a list of them
        One step's normals as ``solve`` reads them (for `from_torchsde_brownian`).

    Methods ``f(t, y)`` → (batch, N·d), ``g_prod(t, y, v)`` → (batch, N·d) for v (batch,
    brownian_size), ``f_and_g_prod(t, y, v)`` (one pass), ``diffusion(t, y)`` → the dense g,
    (batch, N·d, brownian_size); with ``dense=True`` in `to_torchsde`, also ``g`` (the dense
    matrix, for torchsde's schemes that need it; torchsde evaluates it once per ``sdeint``)."""

    noise_type = "general"
    sde_type = "ito"

    def __init__(self, sde: LimitSDE, shape: tuple[int, int, int], field_shape: tuple[int, int, int]):
        self.sde = sde
        self.shape = shape
        self.field_shape = field_shape
        self.state_size = shape[1] * shape[2]
        self.brownian_size = field_shape[1] * field_shape[2]

    # ------------------------------------------------------------------ layout
    def unflatten(self, y: torch.Tensor) -> torch.Tensor:
        """Flat states as tokens.

        Parameters
        ----------
        y : torch.Tensor, shape (..., batch, N·d)
            Flat states (token i's coordinates at i·d .. i·d + d − 1).

        Returns
        -------
        torch.Tensor, shape (..., batch, N, d)
            The same numbers as tokens (a view where possible).
        """
        return y.reshape(*y.shape[:-1], self.shape[1], self.shape[2])

    def flatten(self, X: torch.Tensor) -> torch.Tensor:
        """Tokens as flat states, the inverse of `unflatten`.

        Parameters
        ----------
        X : torch.Tensor, shape (..., batch, N, d)
            Tokens.

        Returns
        -------
        torch.Tensor, shape (..., batch, N·d)
            The same numbers, flat.
        """
        return X.reshape(*X.shape[:-2], self.state_size)

    def project(self, y: torch.Tensor) -> torch.Tensor:
        r"""Each token of flat states scaled back to unit norm (the projection after an Euler step).

        Parameters
        ----------
        y : torch.Tensor, shape (..., batch, N·d)
            Flat states.

        Returns
        -------
        torch.Tensor, shape (..., batch, N·d)
            $\mathrm{LN}$ of each token, flat.
        """
        return self.flatten(normalize(self.unflatten(y)))

    @property
    def path_shape(self) -> Union[tuple[int, int, int], list[tuple[int, int, int]]]:
        """The shape (or parts) of one step's normals as ``solve``'s noise source reads them, for
        `from_torchsde_brownian`: ``field_shape``, or [(batch, M, d), (batch, 1, d)] for
        random features with σ_W > 0 (B^k, then B⁰)."""
        B, m, d = self.field_shape
        noise = self.sde.noise
        if isinstance(noise, RandomFeatureField) and noise.sigma_W > 0:
            return [(B, m - 1, d), (B, 1, d)]
        return self.field_shape

    # ------------------------------------------------------------------ coefficients
    def coefficients(self, X: torch.Tensor) -> torch.Tensor:
        r"""The coefficients A(X) of the field's increment $\Delta W = A(X)\,\Delta B$, with $\Delta B$
        read as (batch, m, d): $K(X)^{1/2}$ for the exact field (m = N), the scaled features
        $\sigma\,\phi(\cdot)/\sqrt{M}$ (and $\sigma\sigma_W$ for B⁰) for random features, zeros
        without noise.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            Unit tokens.

        Returns
        -------
        torch.Tensor, shape (batch, N, m)
            A(X).
        """
        noise = self.sde.noise
        B, N, d = X.shape
        if noise is None:
            return X.new_zeros(B, N, 1)
        if isinstance(noise, ExactField):
            return sqrt_psd(noise.covariance(X, torch.float64), noise.sqrt_method).to(X.dtype)
        assert isinstance(noise, RandomFeatureField)  # checked by to_torchsde
        A = noise.features_at(X) * (noise.scale / math.sqrt(noise.features))
        if noise.sigma_W > 0:
            A = torch.cat([A, A.new_full((B, N, 1), noise.scale * noise.sigma_W)], dim=-1)
        return A

    # ------------------------------------------------------------------ torchsde's contract
    def f(self, t: Any, y: torch.Tensor) -> torch.Tensor:
        r"""The Itô drift of the limit SDE (SPEC §3),

        $$
        f(x_i) = P_{x_i}\,\mathrm{Attn}_i(X) - \frac{\kappa(1)\,(d-1)}{2}\, x_i .
        $$

        Parameters
        ----------
        t : float or torch.Tensor
            The time (unused: the limit SDE is autonomous).
        y : torch.Tensor, shape (batch, N·d)
            Flat states.

        Returns
        -------
        torch.Tensor, shape (batch, N·d)
            The drift, flat.
        """
        X = self.unflatten(y)
        return self.flatten(self.sde.attention_drift(X) + self.sde.ito_correction(X))

    def g_prod(self, t: Any, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        r"""The diffusion applied to a vector, $g(y)\,v = P_x\,(A(X)\,V)$ with V = v read as (batch, m, d).

        Parameters
        ----------
        t : float or torch.Tensor
            The time (unused: the limit SDE is autonomous).
        y : torch.Tensor, shape (batch, N·d)
            Flat states.
        v : torch.Tensor, shape (batch, m·d)
            Brownian increments.

        Returns
        -------
        torch.Tensor, shape (batch, N·d)
            g(y) v, tangent to each token.
        """
        X = self.unflatten(y)
        if self.sde.noise is None:
            return torch.zeros_like(y)
        V = v.reshape(v.shape[0], self.field_shape[1], self.field_shape[2])
        return self.flatten(tangent(X, self.coefficients(X) @ V))

    def f_and_g_prod(self, t: Any, y: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f(y), g(y) v) in one call (what torchsde's Euler asks for).

        Parameters
        ----------
        t : float or torch.Tensor
            The time (unused: the limit SDE is autonomous).
        y : torch.Tensor, shape (batch, N·d)
            Flat states.
        v : torch.Tensor, shape (batch, m·d)
            Brownian increments.

        Returns
        -------
        tuple of torch.Tensor
            `f` and `g_prod`, each (batch, N·d).
        """
        return self.f(t, y), self.g_prod(t, y, v)

    def diffusion(self, t: Any, y: torch.Tensor) -> torch.Tensor:
        r"""The dense diffusion matrix, $g_{(i,a),(k,c)} = A_{ik}\,(P_{x_i})_{ac}$ (memory (N·d)·(m·d)
        per sample).

        Parameters
        ----------
        t : float or torch.Tensor
            The time (unused: the limit SDE is autonomous).
        y : torch.Tensor, shape (batch, N·d)
            Flat states.

        Returns
        -------
        torch.Tensor, shape (batch, N·d, m·d)
            g(y).
        """
        X = self.unflatten(y)
        B, N, d = X.shape
        P = torch.eye(d, dtype=X.dtype, device=X.device) - X.unsqueeze(-1) * X.unsqueeze(-2)  # (B, N, d, d)
        A = self.coefficients(X) if self.sde.noise is not None else X.new_zeros(B, N, self.field_shape[1])
        return torch.einsum("bik,biac->biakc", A, P).reshape(B, N * d, self.brownian_size)


class DenseTorchsdeSDE(TorchsdeSDE):
    """`TorchsdeSDE` with the dense ``g(t, y)`` (batch, N·d, m·d) as well.

    Parameters
    ----------
    sde : LimitSDE
        The limit SDE.
    shape : tuple of int
        (batch, N, d) of the tokens.
    field_shape : tuple of int
        (batch, m, d) of the Brownian channels.
    """

    def g(self, t: Any, y: torch.Tensor) -> torch.Tensor:
        """The dense diffusion matrix, `TorchsdeSDE.diffusion`.

        Parameters
        ----------
        t : float or torch.Tensor
            The time (unused: the limit SDE is autonomous).
        y : torch.Tensor, shape (batch, N·d)
            Flat states.

        Returns
        -------
        torch.Tensor, shape (batch, N·d, m·d)
            g(y).
        """
        return self.diffusion(t, y)


def to_torchsde(
    sde: LimitSDE,
    shape: Sequence[int],
    seed: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    dtype: torch.dtype = torch.float64,
    device: Union[str, torch.device] = "cpu",
    dense: bool = False,
) -> TorchsdeSDE:
    """The limit SDE ``sde`` as a torchsde SDE on flat states (batch, N·d).

    Parameters
    ----------
    sde : LimitSDE
        Attention (any, or None) and noise: an [`ExactField`][stochformer.model.noise.ExactField], a
        [`RandomFeatureField`][stochformer.model.noise.RandomFeatureField] or None. Its drift and Itô correction
        are used as they are (κ(1) of ``sde``). A random-feature field needs its features drawn
        for this batch (one field per sample, drawn here if not yet): torchsde's Brownian motion
        has channels per sample, so one field shared by every sample (drawn for batch 1) is not
        what ``solve`` with such a field simulates.
    shape : (batch, N, d)
        The tokens' shape.
    seed, generator : int or torch.Generator, optional
        For the per-run draws of `LimitSDE.reset` (a random-feature field's features when
        not drawn yet, a resampled attention's); default seed 0.
    dtype, device
        Those of the tokens.
    dense : bool
        Also define ``g`` (the dense (batch, N·d, m·d) matrix) for schemes that need it.

    Returns
    -------
    TorchsdeSDE
        ``noise_type = "general"``, ``sde_type = "ito"``, ``f``, ``g_prod``, ``f_and_g_prod``;
        ``brownian_size`` = m·d (N·d for the exact field, M·d (+ d with σ_W > 0) for random features).

    Examples
    --------
    >>> import torch, torchsde
    >>> from stochformer.model import ExactField, LimitSDE, NoiseKernel
    >>> from stochformer.core.sphere import uniform
    >>> sde = LimitSDE(noise=ExactField(NoiseKernel("relu", 3)), integrator="euler")
    >>> ts_sde = to_torchsde(sde, (4, 5, 3))
    >>> X0 = uniform(4, 5, 3, seed=0)
    >>> bm = torchsde.BrownianInterval(0.0, 1.0, size=(4, ts_sde.brownian_size), dtype=torch.float64)
    >>> ys = sdeint_projected(ts_sde, ts_sde.flatten(X0), torch.linspace(0, 1, 11), bm)
    >>> ts_sde.unflatten(ys).shape
    torch.Size([11, 4, 5, 3])
    """
    if not isinstance(sde, LimitSDE):
        raise TypeError(f"sde: must be a LimitSDE (got {type(sde).__name__})")
    if len(shape) != 3 or any(int(n) < 1 for n in shape) or int(shape[2]) < 2:
        raise ValueError(f"shape: must be (batch, N, d) with batch, N >= 1 and d >= 2 (got {tuple(shape)})")
    B, N, d = (int(n) for n in shape)
    noise = sde.noise
    if noise is not None and not isinstance(noise, (ExactField, RandomFeatureField)):
        raise ValueError(f"sde.noise: to_torchsde takes an ExactField, a RandomFeatureField or None (got "
                         f"{type(noise).__name__}: its increments are not a fixed Brownian motion's)")
    if generator is None:
        generator = torch.Generator(device=device).manual_seed(0 if seed is None else int(seed))
    sde.reset(B, d, generator, dtype, device)
    if noise is None:
        m = 1
    elif isinstance(noise, ExactField):
        m = N
    else:
        m = noise.features + (1 if noise.sigma_W > 0 else 0)
    cls = DenseTorchsdeSDE if dense else TorchsdeSDE
    return cls(sde, (B, N, d), (B, m, d))


def sdeint_projected(
    sde: TorchsdeSDE, y0: torch.Tensor, ts: torch.Tensor, bm: Any, method: str = "euler", **kwargs: Any
) -> torch.Tensor:
    """torchsde's ``sdeint`` one interval ``[ts[k], ts[k+1]]`` at a time (one step of ``method``
    each), every token projected back to the sphere after each step.

    Parameters
    ----------
    sde : TorchsdeSDE
        From `to_torchsde`.
    y0 : (batch, N·d)
        Flat initial tokens (unit rows once unflattened).
    ts : (n + 1,)
        Increasing times; the step is ``ts[k+1] − ts[k]``.
    bm
        A torchsde Brownian motion of size (batch, ``sde.brownian_size``) over ``[ts[0], ts[-1]]``.
    method : str
        A torchsde Itô scheme (``"euler"``, ``"srk"`` needs diagonal noise and is refused by torchsde).
    **kwargs
        Passed to ``torchsde.sdeint``.

    Returns
    -------
    torch.Tensor
        (n + 1, batch, N·d), unit tokens after every step.
    """
    torchsde = require("torchsde", "sdeint_projected")
    ts = torch.as_tensor(ts, dtype=y0.dtype, device=y0.device)
    out = [y0]
    y = y0
    for k in range(len(ts) - 1):
        span = ts[k:k + 2]
        y = torchsde.sdeint(sde, y, span, bm=bm, method=method, dt=float(span[1] - span[0]), **kwargs)[-1]
        y = sde.project(y)
        out.append(y)
    return torch.stack(out)


class GivenPath(BrownianPath):
    """A [`BrownianPath`][stochformer.core.brownian.BrownianPath] of several parts given as tensors
    (``normals[j]``: (steps, *part_j)), e.g. a random-feature field's B^k and B⁰; step k of n
    is q^{−1/2} Σ of its q = steps/n fine normals, as for any path.

    Parameters
    ----------
    normals : sequence of torch.Tensor
        One tensor (steps, *part) per part, the same number of fine steps in each, i.i.d. N(0, 1).
    """

    def __init__(self, normals: Sequence[torch.Tensor]):
        first = normals[0]
        super().__init__([tuple(z.shape[1:]) for z in normals], int(first.shape[0]), seed=0, dtype=first.dtype,
                         device=first.device)
        self.given = [z.to(first.dtype) for z in normals]

    def increment(self, k: int, n: int) -> list[torch.Tensor]:
        if n < 1 or self.steps % n:
            raise ValueError(f"BrownianPath: {n} steps do not divide the path's {self.steps} fine steps")
        if not 0 <= k < n:
            raise ValueError(f"BrownianPath: step {k} outside 0..{n - 1}")
        q = self.steps // n
        if q == 1:
            return [z[k] for z in self.given]
        return [z[k * q:(k + 1) * q].sum(0) / math.sqrt(q) for z in self.given]


def _increment(bm: Any, a: float, b: float) -> torch.Tensor:
    """W(b) − W(a) of a torchsde Brownian motion (``bm(a, b)``) or a diffrax-style path (``bm.evaluate(a, b)``)."""
    if hasattr(bm, "evaluate"):
        return torch.from_numpy(np.array(bm.evaluate(a, b), dtype=np.float64))
    if callable(bm):
        return torch.as_tensor(bm(a, b))
    raise TypeError(f"bm: must be a torchsde Brownian motion (bm(t0, t1)) or have evaluate(t0, t1) (got {type(bm).__name__})")


def from_torchsde_brownian(
    bm: Any,
    shape: Union[Sequence[int], Sequence[Sequence[int]]],
    steps: int,
    t0: float = 0.0,
    t1: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> BrownianPath:
    """The [`BrownianPath`][stochformer.core.brownian.BrownianPath] of a Brownian motion's increments on
    ``steps`` equal steps of ``[t0, t1]``: fine normals Ξ_k = (W(t_{k+1}) − W(t_k)) / √Δt, read in
    the project's layout ``shape``.

    Parameters
    ----------
    bm
        A torchsde Brownian motion (``BrownianInterval``, anything with ``bm(ta, tb)`` → increment)
        or a diffrax-style path (``bm.evaluate(ta, tb)`` → increment, converted through numpy), of
        size (batch, prod(shape[1:])) (or any size with prod(shape) entries).
    shape : tuple of int, or a list of them
        The normals of one step as the noise source reads them: (batch, N, d) for the exact field,
        (batch, M, d) for random features with σ_W = 0, or a list of parts read in order from
        each sample's channels, [(batch, M, d), (batch, 1, d)] for random features with σ_W > 0
        (``TorchsdeSDE.path_shape``).
    steps : int
        Fine steps of the path; [`stochformer.solve`][stochformer.solve] may use any divisor of it.
    t0, t1 : float
        The interval [t0, t1]; ``solve``'s T is t1 − t0.
    dtype : torch.dtype
        Of the normals.

    Returns
    -------
    BrownianPath
        ``from_normals`` of the (steps, *shape) normals, or a `GivenPath` of the parts.

    Examples
    --------
    >>> import torch, torchsde
    >>> bm = torchsde.BrownianInterval(0.0, 1.0, size=(2, 6), dtype=torch.float64)
    >>> from_torchsde_brownian(bm, (2, 2, 3), steps=8)
    BrownianPath(shape=(2, 2, 3), steps=8)
    """
    given: list[Any] = list(shape)
    multi = len(given) > 0 and not isinstance(given[0], (int, np.integer))
    parts = [tuple(int(n) for n in p) for p in given] if multi else [tuple(int(n) for n in given)]
    if not parts or any(len(p) < 1 or min(p) < 1 for p in parts):
        raise ValueError(f"shape: must be a shape of positive lengths or a list of them (got {shape!r})")
    if any(p[0] != parts[0][0] for p in parts):
        raise ValueError(f"shape: the parts {parts} must share their leading (batch) length")
    sizes = [math.prod(p[1:]) for p in parts]
    if isinstance(steps, bool) or int(steps) != steps or steps < 1:
        raise ValueError(f"steps: must be an integer >= 1 (got {steps!r})")
    if not (math.isfinite(t0) and math.isfinite(t1) and t1 > t0):
        raise ValueError(f"t0, t1: need finite t0 < t1 (got {t0}, {t1})")
    # the grid of ``torch.linspace(t0, t1, steps + 1)`` in float64, as a solver's ``ts`` is usually made: a
    # BrownianInterval read at times 1 ulp apart gives increments ~√ulp ≈ 1e-8 apart (its bridge)
    grid = torch.linspace(t0, t1, int(steps) + 1, dtype=torch.float64).tolist()
    scale = 1.0 / math.sqrt((t1 - t0) / steps)
    normals: list[list[torch.Tensor]] = [[] for _ in parts]
    for k in range(int(steps)):
        inc = _increment(bm, grid[k], grid[k + 1])
        if inc.numel() != parts[0][0] * sum(sizes):
            raise ValueError(f"bm: an increment has {inc.numel()} entries ({tuple(inc.shape)}), shape {shape} needs "
                             f"{parts[0][0] * sum(sizes)}")
        chunks = (inc.to(dtype).reshape(parts[0][0], sum(sizes)) * scale).split(sizes, dim=1)
        for j, (p, z) in enumerate(zip(parts, chunks)):
            normals[j].append(z.reshape(p))
    if not multi:
        return BrownianPath.from_normals(torch.stack(normals[0]))
    return GivenPath([torch.stack(z) for z in normals])
