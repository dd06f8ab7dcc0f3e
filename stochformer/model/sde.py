r"""The limit SDE with common noise (SPEC §3) and its integrators.

Itô form, for every token i:

$$
dX^i = \Big[P_{X^i}\, \mathrm{Attn}(\mu_t, X^i) - \kappa(1)\,\frac{d-1}{2}\, X^i\Big]\, dt + P_{X^i}\, W(dt, X^i)
$$

The field W is any noise source of [`stochformer.model.noise`][stochformer.model.noise] (exact, random features, MLP);
its Brownian normals come from the step's [`Draws`][stochformer.core.brownian.Draws], so that a shared
[`BrownianPath`][stochformer.core.brownian.BrownianPath] couples the SDE with other systems.
[`LimitSDE.step`][stochformer.model.sde.LimitSDE.step] maps X (batch, N, d), unit rows, to the state one step ``dt`` later with its
``integrator``, a small object with ``step(sde, X, dt, dW)``:

- [`EulerMaruyama`][stochformer.model.sde.EulerMaruyama] (``euler``): projected Euler–Maruyama, Itô, with the correction term
  (strong order ½).
- [`StratonovichHeun`][stochformer.model.sde.StratonovichHeun] (``heun``, the default): projected Stratonovich Heun. Strong order ½
  as well — the noise is not commutative (tangent fields on the sphere do not commute) and no
  scheme that uses only increments does better without Lévy areas — but with a smaller error
  constant (about 0.75× the Euler error at equal step, measured in ``docs/convergence.md``) and
  second order in the drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Optional, Protocol

import torch

from ..core.sphere import normalize, tangent
from ..core.validation import ArgumentTypeError, Check, Methods, NonNegativeFloat, check_fits, first_output, short, validated
from .attention import Attention, start_run
from .noise import NoiseSource, Randomness


class Integrator(Protocol):
    """How one step of the SDE is taken from the field increment ΔW (batch, N, d); ``strong_order``:
    the order of its pathwise error in Δt for this SDE (what ``converge`` and the tests measure)."""

    @property
    def strong_order(self) -> float: ...

    def step(self, sde: "LimitSDE", X: torch.Tensor, dt: float, dW: torch.Tensor) -> torch.Tensor:
        """One step of ``sde`` from X given the field's increment.

        Parameters
        ----------
        sde : LimitSDE
            The SDE (its drift, Itô correction and attention).
        X : torch.Tensor, shape (batch, N, d)
            Unit tokens.
        dt : float
            The step.
        dW : torch.Tensor, shape (batch, N, d)
            The field's increment at X (``sde.increment``).

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            Unit tokens one step later.
        """
        ...


@dataclass(frozen=True)
class EulerMaruyama:
    r"""Projected Euler–Maruyama (Itô):

    $$
    X' = \mathrm{LN}\Big(X + \Big[P_X \mathrm{Attn}(X) - \kappa(1)\,\frac{d-1}{2}\,X\Big]\,dt + P_X\,\Delta W\Big).
    $$

    The projection LN only removes the O(dt) fluctuation of the norm; the Itô correction keeps
    the mean norm at 1 to first order (strong order ½).

    Examples
    --------
    >>> import stochformer as sf
    >>> sf.EulerMaruyama().strong_order
    0.5
    """

    strong_order: ClassVar[float] = 0.5

    def step(self, sde: "LimitSDE", X: torch.Tensor, dt: float, dW: torch.Tensor) -> torch.Tensor:
        """One projected Euler–Maruyama step (the formula above).

        Parameters
        ----------
        sde : LimitSDE
            The SDE (its drift, Itô correction and attention).
        X : torch.Tensor, shape (batch, N, d)
            Unit tokens.
        dt : float
            The step.
        dW : torch.Tensor, shape (batch, N, d)
            The field's increment at X (``sde.increment``).

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            Unit tokens one step later.
        """
        drift = sde.attention_drift(X) + sde.ito_correction(X)
        return normalize(X + dt * drift + tangent(X, dW))


@dataclass(frozen=True)
class StratonovichHeun:
    r"""Projected Heun for the Stratonovich form $dX = P_X \mathrm{Attn}\,dt + P_X \circ W(dt, X)$ (SPEC §3):

    $$
    \begin{aligned}
    \Delta W &= W(t+dt, X) - W(t, X) \qquad \text{(one field evaluation, at } X\text{)},\\
    \tilde X &= \mathrm{LN}\big(X + dt\,P_X \mathrm{Attn}(X) + P_X\,\Delta W\big),\\
    X' &= \mathrm{LN}\Big(X + \frac{dt}{2}\big(P_X \mathrm{Attn}(X) + P_{\tilde X} \mathrm{Attn}(\tilde X)\big)
    + \frac12\big(P_X + P_{\tilde X}\big)\,\Delta W\Big).
    \end{aligned}
    $$

    The field increment is held fixed over the step and only the projection is averaged. This is
    consistent with the Itô SDE: $\frac12(P_X + P_{\tilde X})\Delta W$ has mean $-\kappa(1)\frac{d-1}{2} X\,dt$
    (the Itô correction), while the field's own Stratonovich correction is radial and removed by P
    (SPEC §3). Re-rooting K at $\tilde X$ with the same normals would not be: the symmetric root rotates
    its frame with X, which adds a spurious drift (measured: its fine-step limit differs from Euler's
    by ~6× the discretisation error). The final LN only removes an $O(dt^{3/2})$ radial residue. Strong
    order ½, as Euler's: the field's noise does not commute, and a scheme that uses only its
    increments cannot do better (docs/convergence.md); its error constant is smaller.

    Examples
    --------
    >>> import stochformer as sf
    >>> sf.LimitSDE(noise=sf.ExactField(sf.NoiseKernel("relu", 3)), integrator="heun").integrator
    StratonovichHeun()
    """

    strong_order: ClassVar[float] = 0.5

    def step(self, sde: "LimitSDE", X: torch.Tensor, dt: float, dW: torch.Tensor) -> torch.Tensor:
        """One projected Heun step (the formulas above), the field's increment read once at X.

        Parameters
        ----------
        sde : LimitSDE
            The SDE (its drift, Itô correction and attention).
        X : torch.Tensor, shape (batch, N, d)
            Unit tokens.
        dt : float
            The step.
        dW : torch.Tensor, shape (batch, N, d)
            The field's increment at X (``sde.increment``).

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            Unit tokens one step later.
        """
        a = sde.attention_drift(X)
        Xp = normalize(X + dt * a + tangent(X, dW))
        drift = a if sde.attention is None else 0.5 * (a + sde.attention_drift(Xp))
        return normalize(X + dt * drift + 0.5 * (tangent(X, dW) + tangent(Xp, dW)))


#: the integrators by their ``RunConfig.integrator`` name
INTEGRATORS: dict[str, Integrator] = {"euler": EulerMaruyama(), "heun": StratonovichHeun()}


@dataclass(frozen=True)
class IntegratorArg(Check):
    """An integrator: an object with ``step(sde, X, dt, dW)``, or its name in `INTEGRATORS`."""

    def __call__(self, name: str, value: Any) -> Any:
        if isinstance(value, str):
            if value not in INTEGRATORS:
                raise ValueError(f"{name}: unknown integrator {short(value)}; valid names are {', '.join(INTEGRATORS)} "
                                 "(or an object with step(sde, X, dt, dW))")
            return INTEGRATORS[value]
        if not callable(getattr(value, "step", None)):
            raise ArgumentTypeError(f"{name}: must be one of {', '.join(INTEGRATORS)} or an object with "
                                    f"step(sde, X, dt, dW) (got {short(value)})")
        return value


@validated
@dataclass
class LimitSDE:
    r"""The limit SDE of SPEC §3, with the integrator that steps it.

    Each token follows, with common noise $W$ of covariance $\kappa(\langle x, y\rangle)\,I$,

    $$
    dX^i = \Big[P_{X^i}\,\mathrm{Attn}(\mu_t, X^i) - \kappa(1)\,\frac{d-1}{2}\,X^i\Big]\,dt
    + P_{X^i}\,W(dt, X^i),
    $$

    $P_x = I - x x^\top$ the projection onto the tangent space at $x$.

    Parameters
    ----------
    attention : Attention, optional
        Any [`Attention`][stochformer.model.attention.Attention] (None: none).
    noise : NoiseSource, optional
        Any [`NoiseSource`][stochformer.model.noise.NoiseSource] (None: none), e.g. an
        [`ExactField`][stochformer.model.noise.ExactField].
    integrator : Integrator or {"heun", "euler"}, optional
        An [`Integrator`][stochformer.model.sde.Integrator] or its name:
        [`StratonovichHeun`][stochformer.model.sde.StratonovichHeun] (default) or
        [`EulerMaruyama`][stochformer.model.sde.EulerMaruyama].
    kappa1 : float, optional
        $\kappa(1)$ of the noise (noise scale included), >= 0; by default
        ``noise.noise_kernel(d).kappa1`` for the tokens' d.

    Raises
    ------
    ValueError
        A field out of range or an unknown integrator name, naming the field.

    Examples
    --------
    >>> import stochformer as sf
    >>> sde = sf.LimitSDE(attention=sf.SoftmaxAttention(beta=1.0, gamma=1.0),
    ...                   noise=sf.ExactField(sf.NoiseKernel("relu", 3)), integrator="heun")
    >>> X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    >>> sf.solve(sde, X0, T=1.0, steps=20, seed=0).X_final.shape
    (2, 4, 3)
    """

    attention: Optional[Attention] = None
    noise: Optional[Annotated[NoiseSource, Methods(("reset", "increment"))]] = None
    integrator: Annotated[Integrator, IntegratorArg()] = field(default_factory=StratonovichHeun)
    kappa1: Optional[NonNegativeFloat] = None
    _kappa1: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _checked: set = field(default_factory=set, init=False, repr=False, compare=False)

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Start of a run: the parts are checked against the tokens (d, dtype, device), and the
        noise source draws its per-run state.

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
        self._checked.clear()
        check_fits("attention", self.attention, d, dtype, device)
        start_run(self.attention, batch, d, generator, dtype, device)
        check_fits("noise", self.noise, d, dtype, device)
        if self.noise is not None:
            self.noise.reset(batch, d, generator, dtype, device)

    def attention_drift(self, X: torch.Tensor) -> torch.Tensor:
        r"""The attention drift projected on the sphere, $P_{x_i}\,\mathrm{Attn}(\mu, x_i)$ (zero
        without attention).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            Unit tokens.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            Tangent to each token.
        """
        if self.attention is None:
            return torch.zeros_like(X)
        return tangent(X, first_output(self._checked, "attention", self.attention, self.attention, X))

    def _k1(self, d: int) -> float:
        if self.kappa1 is not None:
            return self.kappa1
        if d not in self._kappa1:
            assert self.noise is not None, "LimitSDE._k1: only called with a noise (ito_correction checks)"
            self._kappa1[d] = self.noise.noise_kernel(d).kappa1
        return self._kappa1[d]

    def ito_correction(self, X: torch.Tensor) -> torch.Tensor:
        r"""The Itô correction $-\kappa(1)\,\frac{d-1}{2}\,x$ that keeps $|x| = 1$ (zero without noise).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            Unit tokens.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            The correction at each token.
        """
        if self.noise is None:
            return torch.zeros_like(X)
        d = X.shape[-1]
        return -0.5 * self._k1(d) * (d - 1) * X

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """The field increment ΔW at X (before projection; zero without noise).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            Unit tokens.
        dt : float
            The step.
        draws : torch.Generator or Draws
            The step's randomness.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            ΔW at the tokens.
        """
        if self.noise is None:
            return torch.zeros_like(X)
        return first_output(self._checked, "noise", self.noise, self.noise.increment, X, dt, draws)

    def step(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """One step of ``integrator``; ``draws``: the step's [`Draws`][stochformer.core.brownian.Draws].

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            Unit tokens.
        dt : float
            The step (Δt = T/L).
        draws : torch.Generator or Draws
            The step's randomness.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            The tokens one step later.
        """
        return self.integrator.step(self, X, dt, self.increment(X, dt, draws))
