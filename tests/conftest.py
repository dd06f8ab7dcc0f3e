"""Shared fixtures: small token clouds and generators whose draws a test can replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _cache_key_dir(tmp_path_factory):
    """The key that signs cache entries lives in a folder of the test session (never the user's
    config folder); subprocesses inherit it."""
    mp = pytest.MonkeyPatch()
    mp.setenv("STOCHFORMER_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
    yield
    mp.undo()


def _tokens(batch: int, N: int, d: int, seed: int = 0) -> torch.Tensor:
    X = np.random.default_rng(seed).standard_normal((batch, N, d))
    return torch.from_numpy(X / np.linalg.norm(X, axis=-1, keepdims=True))


def _replay(generator: torch.Generator) -> torch.Generator:
    g = torch.Generator(device=generator.device)
    g.set_state(generator.get_state())
    return g


@pytest.fixture
def tokens():
    """``tokens(batch, N, d, seed=0)``: i.i.d. uniform unit tokens (batch, N, d), float64, drawn
    with numpy (not with the code under test)."""
    return _tokens


@pytest.fixture
def replay():
    """``replay(generator)``: a second generator in the same state, which yields the same draws as
    ``generator`` next (to feed a reference implementation the code's own normals)."""
    return _replay


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)
