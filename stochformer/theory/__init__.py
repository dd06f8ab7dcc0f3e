"""Exact theory where the paper gives bounds (SPEC §8): the two-token diffusion and the expected energy.

- [`pair`][stochformer.theory.pair]: [`PairDiffusion`][stochformer.theory.PairDiffusion], the overlap z = ⟨x₁, x₂⟩ of two tokens under the noise and
  softmax attention (Qᵀ K = βI, V = vI): scale function, the probability of ending antipodal, the
  exponents at the ends and β*, the stationary density, the moments of the time to synchronise;
- [`evolution`][stochformer.theory.evolution]: the law of z_t at any t (Kolmogorov's equations on a birth–death chain built
  from the scale and speed), [`expectation`][stochformer.theory.expectation] of E[f(z_t)];
- [`energy`][stochformer.theory.energy]: the exact E[E_β(μ^N_t)] without attention for any N (N = 2 with attention), its
  long-time rate and the table beside Theorem 1.4's bound λ̄';
- [`value_noise`][stochformer.theory.value_noise]: two tokens under value-matrix noise, P(antipodal) from its scale function
  and the threshold over (β, d) (docs/neighbours.md);
- `quadrature`: the log-space panel quadrature under them.

The package takes a [`NoiseKernel`][stochformer.model.NoiseKernel] and numbers (never a config) and
imports only `stochformer.model`, `stochformer.core.validation`, numpy, scipy and torch.
docs/theory.md derives every formula.
"""

from .energy import EnergyRate, energy_decay_rate, energy_rate_table, expected_energy
from .evolution import Law, PairChain, expectation, law
from .pair import TOLERANCE, End, PairDiffusion, Stationary, SyncTime, antipode_threshold

__all__ = [
    "TOLERANCE", "End", "EnergyRate", "Law", "PairChain", "PairDiffusion", "Stationary", "SyncTime", "antipode_threshold",
    "energy_decay_rate", "energy_rate_table", "expectation", "expected_energy", "law",
]
