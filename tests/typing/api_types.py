"""Checked by mypy (pyproject's ``files``), never run: the top-level names have their real types,
so a wrong call is a type error. Each ``# type: ignore[code]`` below must be needed —
``warn_unused_ignores`` turns one that is not (an API seen as ``Any``) into an error."""

from __future__ import annotations

import stochformer as sf


def typed_entry_points() -> None:
    model = sf.Transformer(sf.SoftmaxAttention(beta=1.0, gamma=1.0), sf.RandomMLP(width=8))
    X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    sf.solve(model, X0, T="five", steps=10, seed=0)  # type: ignore[call-overload]
    sf.solve(model, X0, T=1.0, steps=1.5, seed=0)  # type: ignore[call-overload]
    sf.solve(model, X0, T=1.0, steps=10, seed=0, output="numpy")  # type: ignore[call-overload]
    sf.solve(model, X0, T=1.0, steps=10, seed=0, progress=True)  # type: ignore[call-overload]
    sf.SaveAt(every="often")  # type: ignore[arg-type]
    sf.RandomMLP(width=None)  # type: ignore[arg-type]
    ok = sf.solve(model, X0, T=1.0, steps=10, save=sf.SaveAt(every=5), seed=0)
    ok.mean_cosine.mean("sample")
    sf.solve(model, X0, T=1.0, steps=10, seed=0, progress=sf.ProgressMeter("layers"))
    tensors = sf.solve(model, X0, T=1.0, steps=10, seed=0, output="torch")
    tensors["X_final"].sum().backward()
