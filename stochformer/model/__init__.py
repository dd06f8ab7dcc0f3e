"""What evolves: the model pieces. They take tensors and numbers, never a config.

- :mod:`.activations`: φ by name or any callable; :mod:`.kernel`: κ and the rates of SPEC §2, §5;
- :mod:`.attention`: the :class:`Attention` protocol and :class:`SoftmaxAttention`;
- :mod:`.noise`: the :class:`NoiseSource` protocol, :class:`RandomMLP`, :class:`ExactField`,
  :class:`RandomFeatureField` (normals through :mod:`.rng`);
- :mod:`.transformer`: :class:`Transformer`, the discrete model (SPEC §1);
- :mod:`.sde`: :class:`LimitSDE` and its integrators (SPEC §3); with a random-feature field and
  chunked attention it is also the mean-field particle system (SPEC §4).
"""

from .activations import ACTIVATIONS, Activation
from .attention import Attention, SoftmaxAttention
from .kernel import NoiseKernel, Rates, rates
from .noise import ExactField, NoiseSource, RandomFeatureField, RandomMLP
from .sde import INTEGRATORS, EulerMaruyama, Integrator, LimitSDE, StratonovichHeun
from .transformer import Transformer

__all__ = [
    "ACTIVATIONS", "Activation", "Attention", "EulerMaruyama", "ExactField", "INTEGRATORS", "Integrator", "LimitSDE",
    "NoiseKernel", "NoiseSource", "RandomFeatureField", "RandomMLP", "Rates", "SoftmaxAttention", "StratonovichHeun",
    "Transformer", "rates",
]
