r"""The discrete model: one layer of the deep transformer at random initialisation (SPEC §1).

Post-LN (the default), attention then MLP, the MLP acting on the post-attention token:

$$
Y = \mathrm{LN}\big(X + \Delta t\, \mathrm{Attn}_X(X)\big), \qquad X' = \mathrm{LN}\big(Y + \sqrt{\Delta t}\, s\, G^m(Y)\big).
$$

``parallel``: $X' = \mathrm{LN}\big(X + \Delta t\, \mathrm{Attn}_X(X) + \sqrt{\Delta t}\, s\, G^m(X)\big)$. Either block may be absent.
The √Δt · s factor is applied by the noise source ([`stochformer.model.noise`][stochformer.model.noise]); the MLP may be
any noise source (``ExactField`` is the width m = ∞).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Callable, Literal, Optional

import torch

from ..core.sphere import normalize
from ..core.validation import Methods, check_fits, first_output, validated
from .attention import Attention, start_run
from .noise import NoiseSource, Randomness


@validated
@dataclass
class Transformer:
    r"""The deep transformer's layer map $X_\ell \mapsto X_{\ell+1}$ with step $\Delta t = T/L$ (SPEC §1).

    In the post-LN order each layer is

    $$
    Y = \mathrm{LN}\big(X + \Delta t\,\mathrm{Attn}_X(X)\big), \qquad
    X' = \mathrm{LN}\big(Y + \sqrt{\Delta t}\, s\, G^m(Y)\big),
    $$

    with $\mathrm{LN}$ the projection onto the unit sphere, row by row; in the parallel order
    $X' = \mathrm{LN}\big(X + \Delta t\,\mathrm{Attn}_X(X) + \sqrt{\Delta t}\, s\, G^m(X)\big)$.
    [`step`][stochformer.model.transformer.Transformer.step] maps X (batch, N, d), unit rows, to X'.

    Parameters
    ----------
    attention : Attention, optional
        Any [`Attention`][stochformer.model.attention.Attention], e.g.
        [`SoftmaxAttention`][stochformer.model.attention.SoftmaxAttention] (None: no attention).
    noise : NoiseSource, optional
        Any [`NoiseSource`][stochformer.model.noise.NoiseSource], e.g.
        [`RandomMLP`][stochformer.model.noise.RandomMLP]; it gives the term $\sqrt{\Delta t}\,s\,G^m(Y)$
        (None: no MLP).
    order : {"post_ln", "parallel"}, optional
        Where the MLP acts: after the attention's normalisation (post-LN) or beside it.

    Raises
    ------
    ValueError
        A field of the wrong kind, naming it; at the start of a run, a part that does not fit the
        tokens (d, dtype, device).

    See Also
    --------
    stochformer.model.sde.LimitSDE : the limit $L, m \to \infty$ of this layer map (SPEC §3).

    Examples
    --------
    >>> import torch
    >>> import stochformer as sf
    >>> model = sf.Transformer(attention=sf.SoftmaxAttention(beta=1.0, gamma=1.0),
    ...                        noise=sf.RandomMLP(width=64, activation=torch.tanh))
    >>> X0 = sf.sphere.uniform(batch=2, N=5, d=3, seed=0)
    >>> sf.solve(model, X0, T=1.0, steps=10, seed=0).X_final.shape
    (2, 5, 3)
    """

    attention: Optional[Attention] = None
    noise: Optional[Annotated[NoiseSource, Methods(("reset", "increment"))]] = None
    order: Literal["post_ln", "parallel"] = "post_ln"
    _checked: set = field(default_factory=set, init=False, repr=False, compare=False)

    def capture_parts(self) -> dict[str, object]:
        """Its parts, for [`unsafe_parts`][stochformer.core.capture.unsafe_parts]: the layer itself is
        tensor operations only, so its steps can be captured where its parts' can.

        Returns
        -------
        dict
            ``{"attention": …, "noise": …}`` (None where absent).
        """
        return {"attention": self.attention, "noise": self.noise}

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

    def step(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """One layer; ``draws``: the step's [`Draws`][stochformer.core.brownian.Draws] (or a generator).

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
        return self.layer(X, dt, None if self.noise is None else self._increment(dt, draws))

    def _increment(self, dt: float, draws: Randomness) -> Callable[[torch.Tensor], torch.Tensor]:
        noise = self.noise
        return lambda Y: first_output(self._checked, "noise", noise, noise.increment, Y, dt, draws)  # type: ignore[union-attr]

    def _attend(self, X: torch.Tensor) -> torch.Tensor:
        return first_output(self._checked, "attention", self.attention, self.attention, X)  # type: ignore[arg-type]

    def mlp_input(self, X: torch.Tensor, dt: float) -> torch.Tensor:
        """Where the layer's MLP acts: Y = LN(X + Δt · Attn_X(X)) post-LN, X itself in the parallel
        order.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The layer's input.
        dt : float
            The step.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            Y.
        """
        if self.order == "parallel" or self.attention is None:
            return X
        return normalize(X + dt * self._attend(X))

    def layer(self, X: torch.Tensor, dt: float, increment: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> torch.Tensor:
        """The layer map with a given MLP increment: ``increment(Y)`` (batch, N, d) is the term
        √Δt · s · G^m(Y) at the MLP's input Y ([`mlp_input`][stochformer.model.transformer.Transformer.mlp_input]); None: no MLP.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The layer's input.
        dt : float
            The step.
        increment : callable or None
            Y ↦ the MLP's term (batch, N, d).

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            The layer's output.
        """
        if self.order == "parallel":
            update = torch.zeros_like(X)
            if self.attention is not None:
                update = update + dt * self._attend(X)
            if increment is not None:
                update = update + increment(X)
            return normalize(X + update)
        Y = self.mlp_input(X, dt)
        return Y if increment is None else normalize(Y + increment(Y))
