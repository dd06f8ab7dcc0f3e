"""The one- and two-point motions of the noise alone (no attention), SPEC §3–§4.

From the Itô form of SPEC §3 without attention, dX = −κ(1)(d−1)/2 · X dt + P_X W(dt, X):

* **one point**: a single token is a Brownian motion on S^{d−1} with generator (κ(1)/2)Δ_S, so for
  a fixed x₀, ⟨x₀, X_t⟩ has drift −κ(1)(d−1)/2 · ⟨x₀, X_t⟩ and
  E⟨x₀, X_t⟩ = ⟨x₀, X_0⟩ e^{−κ(1)(d−1)t/2} ([`one_point_mean`][stochformer.model.two_point.one_point_mean]);
* **two points**: u = ⟨X¹, X²⟩ is a scalar diffusion (docs/synchronisation.md derives it),

      du = [κ(u)(d − 2 + u²) − κ(1)(d − 1)u] dt + √(2(1 − u²)(κ(1) − u κ(u))) dB,

  ([`two_point_coefficients`][stochformer.model.two_point.two_point_coefficients]); near u = 1 its first moment grows at λ̄ = (d−1)κ'(1) − (d−3)κ(1)
  and log(1 − u) has variance rate 4(κ(1) + κ'(1)). [`simulate_two_point`][stochformer.model.two_point.simulate_two_point] integrates it
  finely (Euler–Maruyama, clipped to [−1, 1]) as the reference law of u_T.
"""

from __future__ import annotations

import numpy as np
import torch

from .kernel import NoiseKernel


def one_point_mean(kappa1: float, d: int, t) -> np.ndarray:
    """E⟨x₀, X_t⟩ for X_0 = x₀: e^{−κ(1)(d−1)t/2}.

    Parameters
    ----------
    kappa1 : float
        κ(1).
    d : int
        Token dimension.
    t : float or array_like
        Times.

    Returns
    -------
    numpy.ndarray
        The mean, of t's shape.
    """
    return np.exp(-kappa1 * (d - 1) * np.asarray(t, float) / 2)


def two_point_coefficients(kernel: NoiseKernel, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drift b(u) and squared diffusion a(u) of u = ⟨X¹, X²⟩ (float64 tensors of u's shape).

    Parameters
    ----------
    kernel : NoiseKernel
        κ.
    u : torch.Tensor
        Cosines in [−1, 1].

    Returns
    -------
    tuple of torch.Tensor
        (b(u), a(u)).
    """
    u = torch.as_tensor(u, dtype=torch.float64)
    k1, ku, d = kernel.kappa1, kernel.kappa(u), kernel.d
    drift = ku * (d - 2 + u * u) - k1 * (d - 1) * u
    var = 2 * (1 - u * u) * (k1 - u * ku)
    return drift, var.clamp_min(0.0)


def simulate_two_point(kernel: NoiseKernel, u0: float, T: float, steps: int, paths: int, seed: int,
                       grid: int = 4001) -> np.ndarray:
    """u_T of ``paths`` independent solutions of the two-point diffusion from u0, Euler–Maruyama on
    ``steps`` steps of [0, T], each step clipped to [−1, 1]; the coefficients are tabulated on
    ``grid`` points of [−1, 1] and interpolated linearly: (paths,).

    Parameters
    ----------
    kernel : NoiseKernel
        κ.
    u0 : float
        The starting cosine.
    T : float
        The horizon.
    steps : int
        Euler steps.
    paths : int
        Independent paths.
    seed : int
        Seed of the normals.
    grid : int, optional
        Points of the coefficients' table.

    Returns
    -------
    numpy.ndarray, shape (paths,)
        u_T.
    """
    nodes = np.linspace(-1.0, 1.0, grid)
    drift, var = (c.numpy() for c in two_point_coefficients(kernel, torch.from_numpy(nodes)))
    rng = np.random.default_rng(seed)
    u = np.full(paths, float(u0))
    dt = T / steps
    for _ in range(steps):
        b, a = np.interp(u, nodes, drift), np.interp(u, nodes, var)
        u = np.clip(u + b * dt + np.sqrt(a * dt) * rng.standard_normal(paths), -1.0, 1.0)
    return u
