"""The limit SDE with common noise (SPEC §3) and its integrators.

Itô form, for every token i::

    dX^i = [ P_{X^i} Attn(μ_t, X^i) − κ(1) (d−1)/2 · X^i ] dt + P_{X^i} W(dt, X^i)

The field W is any noise source of :mod:`stochformer.model.noise` (exact, random features, MLP);
its Brownian normals come from the step's :class:`~stochformer.core.brownian.Draws`, so that a shared
:class:`~stochformer.core.brownian.BrownianPath` couples the SDE with other systems.
:meth:`LimitSDE.step` maps X (batch, N, d), unit rows, to the state one step ``dt`` later with its
``integrator``, a small object with ``step(sde, X, dt, dW)``:

- :class:`EulerMaruyama` (``euler``): projected Euler–Maruyama, Itô, with the correction term
  (strong order ½).
- :class:`StratonovichHeun` (``heun``, the default): projected Stratonovich Heun. Strong order ½
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

    strong_order: float

    def step(self, sde: "LimitSDE", X: torch.Tensor, dt: float, dW: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class EulerMaruyama:
    """Projected Euler–Maruyama (Itô): X' = LN( X + [P Attn − κ(1)(d−1)/2 X] dt + P ΔW ).

    The projection LN only removes the O(dt) fluctuation of the norm; the Itô correction keeps
    the mean norm at 1 to first order (strong order ½)."""

    strong_order: ClassVar[float] = 0.5

    def step(self, sde: "LimitSDE", X: torch.Tensor, dt: float, dW: torch.Tensor) -> torch.Tensor:
        drift = sde.attention_drift(X) + sde.ito_correction(X)
        return normalize(X + dt * drift + tangent(X, dW))


@dataclass(frozen=True)
class StratonovichHeun:
    """Projected Heun for the Stratonovich form dX = P Attn dt + P ∘ W(dt, X) (SPEC §3)::

        ΔW = W(t+dt, X) − W(t, X)                      (one field evaluation, at X)
        X̃  = LN( X + dt · P_X Attn(X) + P_X ΔW )
        X' = LN( X + dt/2 · (P_X Attn(X) + P_X̃ Attn(X̃)) + ½ (P_X + P_X̃) ΔW )

    The field increment is held fixed over the step and only the projection is averaged. This is
    consistent with the Itô SDE: ½ (P_X + P_X̃) ΔW has mean −κ(1)(d−1)/2 · X dt (the Itô correction),
    while the field's own Stratonovich correction is radial and removed by P (SPEC §3). Re-rooting
    K at X̃ with the same normals would not be: the symmetric root rotates its frame with X, which
    adds a spurious drift (measured: its fine-step limit differs from Euler's by ~6× the
    discretisation error). The final LN only removes an O(dt^{3/2}) radial residue. Strong order
    ½, as Euler's: the field's noise does not commute, and a scheme that uses only its increments
    cannot do better (docs/convergence.md); its error constant is smaller."""

    strong_order: ClassVar[float] = 0.5

    def step(self, sde: "LimitSDE", X: torch.Tensor, dt: float, dW: torch.Tensor) -> torch.Tensor:
        a = sde.attention_drift(X)
        Xp = normalize(X + dt * a + tangent(X, dW))
        drift = a if sde.attention is None else 0.5 * (a + sde.attention_drift(Xp))
        return normalize(X + dt * drift + 0.5 * (tangent(X, dW) + tangent(Xp, dW)))


#: the integrators by their ``RunConfig.integrator`` name
INTEGRATORS: dict[str, Integrator] = {"euler": EulerMaruyama(), "heun": StratonovichHeun()}


@dataclass(frozen=True)
class IntegratorArg(Check):
    """An integrator: an object with ``step(sde, X, dt, dW)``, or its name in :data:`INTEGRATORS`."""

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
    """Drift and diffusion of SPEC §3 and the integrator that steps them.

    ``attention``: any :class:`~stochformer.model.attention.Attention` (None: none); ``noise``: any
    :class:`~stochformer.model.noise.NoiseSource` (None: none); ``kappa1``: κ(1) of the noise
    (noise scale included), by default ``noise.noise_kernel(d).kappa1`` for the tokens' d;
    ``integrator``: an :class:`Integrator` or its name (``"heun"``, ``"euler"``)."""

    attention: Optional[Attention] = None
    noise: Optional[Annotated[NoiseSource, Methods(("reset", "increment"))]] = None
    integrator: Annotated[Integrator, IntegratorArg()] = field(default_factory=StratonovichHeun)
    kappa1: Optional[NonNegativeFloat] = None
    _kappa1: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _checked: set = field(default_factory=set, init=False, repr=False, compare=False)

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Start of a run: the parts are checked against the tokens (d, dtype, device), and the
        noise source draws its per-run state."""
        self._checked.clear()
        check_fits("attention", self.attention, d, dtype, device)
        start_run(self.attention, batch, d, generator, dtype, device)
        check_fits("noise", self.noise, d, dtype, device)
        if self.noise is not None:
            self.noise.reset(batch, d, generator, dtype, device)

    def attention_drift(self, X: torch.Tensor) -> torch.Tensor:
        """P_x Attn(μ, x): (batch, N, d)."""
        if self.attention is None:
            return torch.zeros_like(X)
        return tangent(X, first_output(self._checked, "attention", self.attention, self.attention(X), X))

    def _k1(self, d: int) -> float:
        if self.kappa1 is not None:
            return self.kappa1
        if d not in self._kappa1:
            self._kappa1[d] = self.noise.noise_kernel(d).kappa1
        return self._kappa1[d]

    def ito_correction(self, X: torch.Tensor) -> torch.Tensor:
        """−κ(1)(d−1)/2 · x, the Itô drift that keeps |x| = 1."""
        if self.noise is None:
            return torch.zeros_like(X)
        d = X.shape[-1]
        return -0.5 * self._k1(d) * (d - 1) * X

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """The field increment ΔW at X (before projection)."""
        if self.noise is None:
            return torch.zeros_like(X)
        return first_output(self._checked, "noise", self.noise, self.noise.increment(X, dt, draws), X)

    def step(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """One step of ``integrator``; ``draws``: the step's :class:`~stochformer.core.brownian.Draws`."""
        return self.integrator.step(self, X, dt, self.increment(X, dt, draws))
