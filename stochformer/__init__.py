"""stochformer: deep transformers at random initialisation as interacting particle systems.

See SPEC.md for the science; ``docs/architecture.md`` for how the modules fit together.
"""

__version__ = "0.1.0"
