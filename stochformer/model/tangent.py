"""The tangent flow of one token (SPEC §8): the 1-jet of the noise at the token, the tangent map of
one step of the transformer or of the limit SDE, and the model [`stochformer.solve`][stochformer.solve] steps for
Benettin's method ([`stochformer.experiments.spectrum`][stochformer.experiments.spectrum]; derivations in docs/spectrum.md).

**State.** One token x (batch, 1, d) with a frame V (batch, d, k) of k ≤ d − 1 orthonormal tangent
vectors (columns, Vᵀx = 0), stored as one tensor S (batch, 1 + k, d): row 0 the token, rows 1..k
the frame (S[:, 1:] = Vᵀ).

**The jet.** One step is a map y ↦ f(y) whose randomness is the step's field increment ΔW(y)
(√Δt and the noise scale s included). Its tangent map at x needs ΔW to first order only, through
the jet (batch, 1 + k, d)

    J = [ ΔW(x) ; DΔW(x) v₁ ; … ; DΔW(x) v_k ]       (row 0 the value, row i the derivative along v_i)

and the increment near x is the affine field ΔW(y) ≈ J₀ + ((y − x) V) J_{1:}. Sources:

- [`ExactJet`][stochformer.model.tangent.ExactJet], the limit field of SPEC §3. From E[W_a(x) W_b(y)] = κ(⟨x, y⟩) δ_ab: for
  tangent unit vectors v ⊥ w at x, Cov W(x) = κ(1) I, Cov(DW(x)v) = κ'(1) I, Cov(DW(x)v, DW(x)w) = 0
  and Cov(W(x), DW(x)v) = κ'(1)⟨x, v⟩ I = 0, so J = √Δt diag(√κ, √κ', …, √κ') Ξ with Ξ the step's
  Brownian normals (batch, 1 + k, d).
- [`MLPJet`][stochformer.model.tangent.MLPJet], the random MLP of SPEC §1. Given the layer's inner weights U (m × d) and b_U,
  the features F = [Φ(x); DΦ(x)v₁; …; DΦ(x)v_k] (1 + k, m) with Φ(y) = φ(U y/√d + b_U) and
  DΦ(x)v = φ'(U x/√d + b_U) ∘ (U v)/√d. ``mode="weights"``: explicit output weights W (m × d) and
  b_W, J = s√Δt (F W/√m + σ_W e₀ b_Wᵀ) (the layer itself); ``mode="gaussian"``: the same law
  from fewer normals, J = s√Δt C Ξ with C Cᵀ = FFᵀ/m + σ_W² e₀e₀ᵀ (Cholesky) and Ξ the step's
  Brownian normals (batch, 1 + k, d), so one [`BrownianPath`][stochformer.core.brownian.BrownianPath] couples
  the transformer across Δt and widths and with the SDE (SPEC §3's coupling, for the jet).

**The tangent map** of one step, x ↦ x' and V ↦ JV = Df(x) V (batch, d, k), tangent at x', in
closed form for the three steps of the noise alone (no attention), with a = J₀ and C = J_{1:}ᵀ
(batch, d, k), P_y u = u − y⟨y, u⟩, and D LN(z) u = P_{z/|z|} u/|z|:

- the transformer layer ([`Transformer`][stochformer.model.Transformer], post-LN or parallel):
  z = x + a, JV = P_{x'} (V + C)/|z|;
- Euler–Maruyama ([`EulerMaruyama`][stochformer.model.sde.EulerMaruyama]), c = 1 − κ(1)(d−1)Δt/2:
  z = c x + P_x a, JV = P_{x'} (c V − V⟨x, a⟩ − x (aᵀV) + P_x C)/|z|;
- Stratonovich Heun ([`StratonovichHeun`][stochformer.model.sde.StratonovichHeun]): x̃ = LN(x + P_x a),
  Ũ = P_{x̃}(V − V⟨x, a⟩ − x(aᵀV) + P_x C)/|x + P_x a|, z = x + ½(P_x a + P_{x̃} a),
  JV = P_{x'} (V + ½[−V⟨x, a⟩ − x(aᵀV) + P_x C − Ũ⟨x̃, a⟩ − x̃(aᵀŨ) + P_{x̃} C])/|z|.

[`autodiff_tangent`][stochformer.model.tangent.autodiff_tangent] computes the same by forward-mode automatic differentiation
(``torch.func.jvp``, vectorised over the frame by ``torch.func.vmap``) of the model's own step
([`step_map`][stochformer.model.tangent.step_map]: ``Transformer.layer`` or the integrator's ``step``) with the step's randomness
held fixed in the field y ↦ ΔW(y): the reference the closed forms are tested against.
[`reorthonormalise`][stochformer.model.tangent.reorthonormalise] is Benettin's renormalisation: the QR factorisation JV = Q R (Cholesky QR,
Householder where that fails), the frame replaced by Q and log R_ii returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Callable, Literal, NamedTuple, Optional, Union

import torch

from ..core.brownian import Draws, as_draws
from ..core.sphere import tangent
from ..core.validation import Methods, PositiveInt, validated
from .activations import get_activation
from .kernel import NoiseKernel
from .noise import RandomMLP, Randomness, draw_weights, sqrt_psd
from .rng import NormalDraws
from .sde import EulerMaruyama, LimitSDE, StratonovichHeun
from .transformer import Transformer

#: y ↦ ΔW(y): the step's increment as a function of the token (batch, 1, d) → (batch, 1, d)
Field = Callable[[torch.Tensor], torch.Tensor]


class Jet(NamedTuple):
    """The step's noise at the token: ``value`` the jet J (batch, 1 + k, d) of the module docstring,
    and ``field`` the increment y ↦ ΔW(y) as a function of position whose tangent derivatives at x
    are J's rows (None: the affine field of J, [`affine_field`][stochformer.model.tangent.affine_field]).

    Attributes
    ----------
    value : torch.Tensor, shape (batch, 1 + k, d)
        The jet J: the increment and its tangent derivatives along the frame.
    field : callable or None
        y ↦ ΔW(y), (batch, 1, d) → (batch, 1, d).
    """

    value: torch.Tensor
    field: Optional[Field] = None


def affine_field(x: torch.Tensor, V: torch.Tensor, J: torch.Tensor) -> Field:
    """y ↦ J₀ + ((y − x) V) J_{1:}: the increment to first order in y − x along the frame V, for
    x (batch, 1, d), V (batch, d, k), J (batch, 1 + k, d).

    Parameters
    ----------
    x : torch.Tensor, shape (batch, 1, d)
        The token.
    V : torch.Tensor, shape (batch, d, k)
        The frame.
    J : torch.Tensor, shape (batch, 1 + k, d)
        The jet.

    Returns
    -------
    callable
        y (batch, 1, d) ↦ the increment (batch, 1, d).
    """
    value, slope = J[:, :1], J[:, 1:]
    return lambda y: value + ((y - x) @ V) @ slope


def _dot(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """⟨x, u_j⟩ for a row x (batch, 1, d) and columns u (batch, d, k): (batch, 1, k)."""
    return x @ u


def _project(y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """P_y u for a unit row y (batch, 1, d) and columns u (batch, d, k)."""
    return u - y.mT * _dot(y, u)


# --------------------------------------------------------------------------- sources of the jet


@validated
@dataclass
class ExactJet:
    """The 1-jet of the limit field W (SPEC §3) at one token, for kernel κ (module docstring):
    J = √Δt diag(√κ(1), √κ'(1), …) Ξ, Ξ (batch, 1 + k, d) the step's Brownian normals. Also a noise
    source for one token ([`increment`][stochformer.model.tangent.ExactJet.increment]: the exact field at N = 1, √(Δt κ(1)) ξ), so that
    [`LimitSDE`][stochformer.model.LimitSDE] takes it.

    Parameters
    ----------
    kernel : NoiseKernel
        κ (any object with ``kappa(rho)``, ``d``, ``kappa1`` and ``kappa1_prime``).
    """

    kernel: Annotated[NoiseKernel, Methods(("kappa",))]

    def __post_init__(self) -> None:
        self._roots = (math.sqrt(self.kernel.kappa1), math.sqrt(self.kernel.kappa1_prime))  # κ once, not per step

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Stateless; the tokens' d must be the kernel's.

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
        self.noise_kernel(d)

    def noise_kernel(self, d: int) -> NoiseKernel:
        """Its kernel, checked against the tokens' dimension.

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        if d != self.kernel.d:
            raise ValueError(f"ExactJet: its kernel is for d = {self.kernel.d}, the tokens have d = {d}")
        return self.kernel

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """√(Δt κ(1)) ξ for one token X (batch, 1, d): the exact field's increment at N = 1.

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
        if X.shape[-2] != 1:
            raise ValueError(f"ExactJet: the increment of one token (got N = {X.shape[-2]}); use ExactField for N tokens")
        xi = as_draws(draws).brownian(X.shape, X.dtype, X.device)
        return math.sqrt(dt) * self._roots[0] * xi

    def jet(self, x: torch.Tensor, V: torch.Tensor, dt: float, draws: Draws) -> Jet:
        """J (batch, 1 + k, d) at x (batch, 1, d) along the frame V (batch, d, k).

        Parameters
        ----------
        x : torch.Tensor, shape (batch, 1, d)
            The token.
        V : torch.Tensor, shape (batch, d, k)
            An orthonormal tangent frame at x.
        dt : float
            The step.
        draws : Draws
            The step's randomness.

        Returns
        -------
        Jet
            J (batch, 1 + k, d) and the increment as a function of position.
        """
        B, _, d = x.shape
        k = V.shape[-1]
        xi = draws.brownian((B, 1 + k, d), x.dtype, x.device)
        roots = [self._roots[0]] + [self._roots[1]] * k
        scale = torch.tensor(roots, dtype=x.dtype, device=x.device).unsqueeze(-1)
        return Jet(math.sqrt(dt) * scale * xi)


@validated
@dataclass
class MLPJet:
    """The 1-jet of a random MLP block ``mlp`` ([`RandomMLP`][stochformer.model.noise.RandomMLP]:
    its width m, activation, biases σ_U, σ_W, scale s, gain g, weight law and ``mode``) at one token,
    √Δt · s · G^m (SPEC §1–2; module docstring): fresh U, b_U (and, ``mode="weights"``, W, b_W) from
    the step's generator, the weights U, W of the block's ``law``
    ([`draw_weights`][stochformer.model.noise.draw_weights]); ``mode="gaussian"`` draws the jet given
    U, b_U from its exact conditional law through the step's Brownian normals. The Gaussian weights'
    normals are drawn by the block's ``rng`` ([`NormalDraws`][stochformer.model.rng.NormalDraws]), in
    full precision (a block with ``precision="float32"`` is refused).
    ``draw_width`` (≥ the block's width, default its width): hidden units drawn per step, of which
    the first m are used, so that jets of several widths on one generator seed share their first
    hidden units (nested networks: a coupling across m).

    Parameters
    ----------
    mlp : RandomMLP
        The block.
    draw_width : int, optional
        Hidden units drawn at once (memory), None: all m.
    """

    mlp: RandomMLP
    draw_width: Optional[PositiveInt] = None

    def __post_init__(self) -> None:
        if not isinstance(self.mlp, RandomMLP):
            raise TypeError(f"mlp: must be a RandomMLP (got {type(self.mlp).__qualname__})")
        if self.mlp.precision != "full":
            raise ValueError(f"precision: the jet draws its weights in full precision (got {self.mlp.precision!r})")
        if self.draw_width is not None and self.draw_width < self.mlp.width:
            raise ValueError(f"draw_width: must be at least width = {self.mlp.width} (got {self.draw_width})")
        self._phi = get_activation(self.mlp.activation)
        self._draw = NormalDraws(self.mlp.rng)

    @property
    def mode(self) -> Literal["weights", "gaussian"]:
        """The block's ``mode``: explicit weights, or the conditional Gaussian jet."""
        return self.mlp.mode

    def _weights(self, shape: tuple[int, int, int], generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        """i.i.d. weights of the block's law: Gaussian ones through `NormalDraws`, others by ``draw_weights``."""
        if self.mlp.law != "gaussian":
            return draw_weights(shape, generator, like, self.mlp.law, self.mlp.nu)
        return self._draw(math.prod(shape), generator, like.dtype, like.device).view(shape)

    def noise_kernel(self, d: int) -> NoiseKernel:
        """κ of the block's field.

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        return self.mlp.noise_kernel(d)

    def jet(self, x: torch.Tensor, V: torch.Tensor, dt: float, draws: Draws) -> Jet:
        """J (batch, 1 + k, d) at x (batch, 1, d) along the frame V (batch, d, k); with explicit
        weights also the layer's increment y ↦ s√Δt (φ(g U y/√d + b_U) W/√m + σ_W b_W) itself.

        Parameters
        ----------
        x : torch.Tensor, shape (batch, 1, d)
            The token.
        V : torch.Tensor, shape (batch, d, k)
            An orthonormal tangent frame at x.
        dt : float
            The step.
        draws : Draws
            The step's randomness.

        Returns
        -------
        Jet
            J (batch, 1 + k, d) and the increment as a function of position.
        """
        B, _, d = x.shape
        mlp = self.mlp
        m, M, gen = mlp.width, self.draw_width or mlp.width, draws.generator
        U = self._weights((B, M, d), gen, x)[:, :m] * mlp.gain  # × 1.0 is exact: g = 1 changes no bit
        bias = mlp.sigma_U * torch.randn(B, 1, M, generator=gen, dtype=x.dtype, device=x.device)[..., :m] \
            if mlp.sigma_U > 0 else None
        root_d, coef = math.sqrt(d), mlp.scale * math.sqrt(dt)

        def features(y: torch.Tensor) -> torch.Tensor:
            pre = (y @ U.mT) / root_d
            return pre if bias is None else pre + bias

        pre = features(x)  # (B, 1, m)
        out = torch.func.jvp(self._phi, (pre,), (torch.ones_like(pre),))  # φ and φ', elementwise
        phi, slope = out[0], out[1]
        F = torch.cat([phi, slope * (V.mT @ U.mT) / root_d], dim=1)  # (B, 1 + k, m)
        if self.mode == "weights":
            W = self._weights((B, M, d), gen, x)[:, :m]
            bias_W = mlp.sigma_W * torch.randn(B, 1, d, generator=gen, dtype=x.dtype, device=x.device) if mlp.sigma_W > 0 else None
            J = F @ W / math.sqrt(m)
            if bias_W is not None:
                J = torch.cat([J[:, :1] + bias_W, J[:, 1:]], dim=1)

            def layer_field(y: torch.Tensor) -> torch.Tensor:
                out = self._phi(features(y)) @ W / math.sqrt(m)
                return coef * (out if bias_W is None else out + bias_W)

            return Jet(coef * J, layer_field)
        Fd = F.to(torch.float64)  # the d × d Gram and its factor in float64 whatever the tokens' dtype
        K = Fd @ Fd.mT / m
        K[:, 0, 0] += mlp.sigma_W**2
        C = sqrt_psd(K, "cholesky").to(x.dtype)
        xi = draws.brownian((B, F.shape[1], d), x.dtype, x.device)
        return Jet(coef * (C @ xi))


#: a source of the jet: anything with ``jet(x, V, dt, draws) -> Jet``
FieldJet = Union[ExactJet, MLPJet]


# --------------------------------------------------------------------------- tangent maps


def _layer_tangent(x: torch.Tensor, V: torch.Tensor, a: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    z = x + a
    r = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    xn = z / r
    return xn, _project(xn, V + C) / r


def _shear(x: torch.Tensor, V: torch.Tensor, a: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """D_V(P_y ΔW(y)) at y = x: −V⟨x, a⟩ − x (aᵀV) + P_x C (batch, d, k)."""
    return -V * (x * a).sum(-1, keepdim=True) - x.mT * _dot(a, V) + _project(x, C)


def _euler_tangent(x: torch.Tensor, V: torch.Tensor, a: torch.Tensor, C: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor]:
    z = c * x + tangent(x, a)
    r = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    xn = z / r
    return xn, _project(xn, c * V + _shear(x, V, a, C)) / r


def _heun_tangent(x: torch.Tensor, V: torch.Tensor, a: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    zt = x + tangent(x, a)
    rt = torch.linalg.vector_norm(zt, dim=-1, keepdim=True)
    xt = zt / rt
    Ut = _project(xt, V + _shear(x, V, a, C)) / rt
    z = x + 0.5 * (tangent(x, a) + tangent(xt, a))
    r = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    xn = z / r
    return xn, _project(xn, V + 0.5 * (_shear(x, V, a, C) + _shear(xt, Ut, a, C))) / r


#: what steps one token: the transformer's layer or the limit SDE (no attention)
StepModel = Union[Transformer, LimitSDE]


def has_closed_form(model: StepModel) -> bool:
    """Whether [`closed_form_tangent`][stochformer.model.tangent.closed_form_tangent] knows ``model``'s step: a [`Transformer`][stochformer.model.transformer.Transformer] or a
    [`LimitSDE`][stochformer.model.sde.LimitSDE] with the Euler or Heun integrator, without attention.

    Parameters
    ----------
    model : Transformer or LimitSDE
        The step.

    Returns
    -------
    bool
        True where the closed form applies.
    """
    if getattr(model, "attention", None) is not None:
        return False
    if isinstance(model, Transformer):
        return True
    return isinstance(model, LimitSDE) and isinstance(model.integrator, (EulerMaruyama, StratonovichHeun))


def closed_form_tangent(model: StepModel, x: torch.Tensor, V: torch.Tensor, J: torch.Tensor, dt: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of ``model`` from x (batch, 1, d) with the jet J (batch, 1 + k, d), and its tangent
    map applied to the frame V (batch, d, k): (x', JV), the formulas of the module docstring.
    ``ValueError`` for a model without one ([`has_closed_form`][stochformer.model.tangent.has_closed_form]; use [`autodiff_tangent`][stochformer.model.tangent.autodiff_tangent]).

    Parameters
    ----------
    model : Transformer or LimitSDE
        The step (see [`has_closed_form`][stochformer.model.tangent.has_closed_form]).
    x : torch.Tensor, shape (batch, 1, d)
        The token.
    V : torch.Tensor, shape (batch, d, k)
        The frame.
    J : torch.Tensor, shape (batch, 1 + k, d)
        The jet.
    dt : float
        The step.

    Returns
    -------
    tuple of torch.Tensor
        x' (batch, 1, d) and JV (batch, d, k).
    """
    if not has_closed_form(model):
        raise ValueError(f"model: no closed-form tangent map for {type(model).__name__} (with attention or another "
                         "integrator); use autodiff_tangent")
    a, C = J[:, :1], J[:, 1:].mT
    if isinstance(model, Transformer):
        return _layer_tangent(x, V, a, C)
    if isinstance(model.integrator, EulerMaruyama):
        return _euler_tangent(x, V, a, C, 1.0 - 0.5 * _ito_kappa(model, x.shape[-1]) * (x.shape[-1] - 1) * dt)
    return _heun_tangent(x, V, a, C)


def _ito_kappa(sde: LimitSDE, d: int) -> float:
    """κ(1) of the SDE's Itô correction −κ(1)(d−1)/2 · x (0 without noise, as ``LimitSDE.ito_correction``)."""
    if sde.noise is None:
        return 0.0
    return sde.kappa1 if sde.kappa1 is not None else sde.noise.noise_kernel(d).kappa1


def step_map(model: StepModel, dt: float, increment: Field) -> Callable[[torch.Tensor], torch.Tensor]:
    """The model's own step as a function of the token, y (batch, 1, d) ↦ y', with the increment
    y ↦ ΔW(y) held fixed: ``Transformer.layer`` or ``integrator.step`` of the SDE (for
    [`autodiff_tangent`][stochformer.model.tangent.autodiff_tangent]).

    Parameters
    ----------
    model : Transformer or LimitSDE
        The step.
    dt : float
        The step size.
    increment : callable
        y ↦ ΔW(y), held fixed.

    Returns
    -------
    callable
        y (batch, 1, d) ↦ y' (batch, 1, d).
    """
    if isinstance(model, Transformer):
        return lambda y: model.layer(y, dt, increment)
    return lambda y: model.integrator.step(model, y, dt, increment(y))


def autodiff_tangent(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(f(x), Df(x) V) for a map f of tokens (batch, 1, d) → (batch, 1, d), acting on each sample
    alone, by ``torch.func.jvp`` along each column of V (batch, d, k), vectorised by
    ``torch.func.vmap``: JV (batch, d, k).

    Parameters
    ----------
    f : callable
        A map of tokens (batch, 1, d) → (batch, 1, d), samplewise.
    x : torch.Tensor, shape (batch, 1, d)
        The token.
    V : torch.Tensor, shape (batch, d, k)
        The frame.

    Returns
    -------
    tuple of torch.Tensor
        f(x) (batch, 1, d) and JV (batch, d, k).
    """
    columns = V.permute(2, 0, 1).unsqueeze(2)  # (k, B, 1, d)
    JV = torch.func.vmap(lambda v: torch.func.jvp(f, (x,), (v,))[1])(columns)  # (k, B, 1, d)
    return f(x), JV[:, :, 0].permute(1, 2, 0)


# --------------------------------------------------------------------------- frames


@validated
def tangent_frame(x: torch.Tensor, k: Optional[PositiveInt] = None, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A uniformly random orthonormal frame of k (default d − 1) tangent vectors at each token
    x (batch, 1, d): (batch, d, k), the Householder QR of P_x Z with Z i.i.d. N(0, 1).

    Parameters
    ----------
    x : torch.Tensor, shape (batch, 1, d)
        Unit tokens.
    k : int, optional
        Frame size, 1..d − 1 (default d − 1).
    generator : torch.Generator, optional
        Draws Z.

    Returns
    -------
    torch.Tensor, shape (batch, d, k)
        Orthonormal columns tangent at x.
    """
    B, _, d = x.shape
    k = d - 1 if k is None else k
    if not 1 <= k <= d - 1:
        raise ValueError(f"k: must be in 1..d-1 = {d - 1} (got {k})")
    Z = torch.randn(B, d, k, generator=generator, dtype=x.dtype, device=x.device)
    Q, R = torch.linalg.qr(_project(x, Z))
    return Q * torch.sign(R.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)


def frame_state(x: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """The state S (batch, 1 + k, d) of a token x (batch, 1, d) and its frame V (batch, d, k).

    Parameters
    ----------
    x : torch.Tensor, shape (batch, 1, d)
        The token.
    V : torch.Tensor, shape (batch, d, k)
        Its frame.

    Returns
    -------
    torch.Tensor, shape (batch, 1 + k, d)
        [x; Vᵀ].
    """
    return torch.cat([x, V.mT], dim=1)


def reorthonormalise(S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Benettin's renormalisation of a state S (batch, 1 + k, d) whose frame rows are the propagated
    vectors W = JV: W projected onto the tangent space at the token (rounding), W = Q R with R
    upper triangular with positive diagonal; returns the state with the frame Q and log R_ii
    (batch, k). Cholesky QR (R = chol(WᵀW)ᵀ, Q = W R⁻¹: orthonormal to rounding for the well
    conditioned W of one step), Householder QR for the samples whose Cholesky factor fails or whose
    diagonal spans more than 10⁴ (ill conditioned).

    Parameters
    ----------
    S : torch.Tensor, shape (batch, 1 + k, d)
        The token and its propagated frame rows.

    Returns
    -------
    tuple of torch.Tensor
        The state with the frame Q (batch, 1 + k, d) and log R_ii (batch, k).
    """
    x = S[:, :1]
    W = _project(x, S[:, 1:].mT)
    L, info = torch.linalg.cholesky_ex(W.mT @ W)
    diag = L.diagonal(dim1=-2, dim2=-1)
    bad = (info > 0) | ~(diag.amin(-1) * 1e4 > diag.amax(-1))
    Q = torch.linalg.solve_triangular(L, W.mT, upper=False).mT
    log_r = diag.log()
    if bool(bad.any()):
        Qb, Rb = torch.linalg.qr(W[bad])
        sign = torch.sign(Rb.diagonal(dim1=-2, dim2=-1))
        # an ill-conditioned W leaves Qb off the tangent space by its rounding: project and orthonormalise again
        Qb, Rb2 = torch.linalg.qr(_project(x[bad], Qb * sign.unsqueeze(-2)))
        Q = Q.clone()
        Q[bad] = Qb * torch.sign(Rb2.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)
        log_r = log_r.clone()
        log_r[bad] = Rb.diagonal(dim1=-2, dim2=-1).abs().log()
    return frame_state(x, Q), log_r


# --------------------------------------------------------------------------- the model solve steps


@validated
@dataclass
class TangentFlow:
    """One token and its frame of tangent vectors, for [`stochformer.solve`][stochformer.solve]: [`step`][stochformer.model.tangent.TangentFlow.step] maps
    a state S (batch, 1 + k, d) (module docstring) to the token one step later and the propagated
    frame JV (not renormalised: a hook does that, [`reorthonormalise`][stochformer.model.tangent.reorthonormalise]).

    ``model``: the step ([`Transformer`][stochformer.model.transformer.Transformer] or [`LimitSDE`][stochformer.model.sde.LimitSDE], without attention; its noise
    source is not used: the jet's is); ``jet``: the source of the step's jet ([`ExactJet`][stochformer.model.tangent.ExactJet],
    [`MLPJet`][stochformer.model.tangent.MLPJet]); ``jacobian``: ``"closed_form"`` ([`closed_form_tangent`][stochformer.model.tangent.closed_form_tangent]) or
    ``"autodiff"`` ([`autodiff_tangent`][stochformer.model.tangent.autodiff_tangent] of [`step_map`][stochformer.model.tangent.step_map], with the jet's own field).

    Parameters
    ----------
    model : Transformer or LimitSDE
        The step.
    jet : ExactJet or MLPJet
        The noise's jet (any object with ``jet(x, V, dt, draws)``).
    jacobian : {"closed_form", "autodiff"}, optional
        How the tangent map is applied.
    """

    model: StepModel
    jet: Annotated[FieldJet, Methods(("jet",))]
    jacobian: Literal["closed_form", "autodiff"] = "closed_form"

    #: the frame's rows are not unit vectors between renormalisations
    on_sphere = False

    def __post_init__(self) -> None:
        if getattr(self.model, "attention", None) is not None:
            raise ValueError("model: the tangent flow of one token is of the noise alone (attention = None)")
        if self.jacobian == "closed_form" and not has_closed_form(self.model):
            raise ValueError(f"jacobian: no closed form for {type(self.model).__name__} with this integrator; use 'autodiff'")

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Stateless: the jets draw everything per step.

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

    def step(self, S: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """S (batch, 1 + k, d) → [x'; (JV)ᵀ]; ``draws``: the step's [`Draws`][stochformer.core.brownian.Draws].

        Parameters
        ----------
        S : torch.Tensor, shape (batch, 1 + k, d)
            The token and its frame.
        dt : float
            The step.
        draws : torch.Generator or Draws
            The step's randomness.

        Returns
        -------
        torch.Tensor, shape (batch, 1 + k, d)
            [x'; (JV)ᵀ], the frame not renormalised.
        """
        x, V = S[:, :1], S[:, 1:].mT
        jet = self.jet.jet(x, V, dt, as_draws(draws))
        if self.jacobian == "closed_form":
            xn, JV = closed_form_tangent(self.model, x, V, jet.value, dt)
        else:
            f = step_map(self.model, dt, jet.field or affine_field(x, V, jet.value))
            xn, JV = autodiff_tangent(f, x, V)
        return frame_state(xn, JV)
