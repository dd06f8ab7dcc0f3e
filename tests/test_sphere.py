"""Initial tokens: drawn from a config's ``init`` (uniform, cluster, pair; seeds and defaults), and
read from a .npy file (``io.tokens``): shared or per sample, normalised, rows of any magnitude,
format versions, and every bad array refused with one message that names ``init.path``."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from stochformer.config import InitConfig
from stochformer.config.build import initial_tokens
from stochformer.core.sphere import cluster, pair, uniform
from stochformer.io.tokens import load_token_array, load_tokens

from conftest import close


def test_load_tokens_shared_or_per_sample_and_normalised(tmp_path):
    rng = np.random.default_rng(0)
    shared, per_sample = 3.0 * rng.standard_normal((4, 3)), rng.integers(1, 5, size=(2, 4, 3))
    np.save(tmp_path / "shared.npy", shared)
    np.save(tmp_path / "batch.npy", per_sample)
    X = load_tokens(tmp_path / "shared.npy", 2, 4, 3)
    assert X.dtype == torch.float64 and X.device.type == "cpu"
    ref = shared / np.linalg.norm(shared, axis=-1, keepdims=True)
    np.testing.assert_allclose(X.numpy(), np.stack([ref, ref]), rtol=0, atol=1e-15)
    X[0, 0, 0] = 7.0  # the samples are copies, not views of one array
    assert X[1, 0, 0] != 7.0
    Y = load_tokens(tmp_path / "batch.npy", 2, 4, 3, dtype=torch.float32)
    assert Y.dtype == torch.float32
    np.testing.assert_allclose(Y.numpy(), per_sample / np.linalg.norm(per_sample, axis=-1, keepdims=True), atol=1e-7)


def test_load_token_array_errors(tmp_path):
    (tmp_path / "junk.npy").write_text("not an array")
    np.save(tmp_path / "text.npy", np.array([["a", "b", "c"]] * 4))
    np.save(tmp_path / "shape.npy", np.ones((3, 4)))
    nan = np.ones((4, 3))
    nan[2, 1] = np.inf
    np.save(tmp_path / "nan.npy", nan)
    zero = np.ones((2, 4, 3))
    zero[1, 3] = 0.0
    np.save(tmp_path / "zero.npy", zero)
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}] * 12, dtype=object).reshape(4, 3), allow_pickle=True)
    cases = {
        "junk.npy": r"init\.path: cannot read .*junk\.npy as a \.npy array: .+",
        "missing.npy": r"init\.path: cannot read .*missing\.npy as a \.npy array: .+",
        "pickled.npy": r"init\.path: array has dtype object; expected real numbers",  # refused from its header, never unpickled
        "text.npy": r"init\.path: array has dtype <U1; expected real numbers",
        "shape.npy": r"init\.path: array has shape \(3, 4\); expected \(4, 3\) or \(2, 4, 3\)",
        "nan.npy": r"init\.path: array contains non-finite values",
        "zero.npy": r"init\.path: array has a zero row; tokens must be non-zero \(they are normalised\)",
    }
    for name, message in cases.items():
        with pytest.raises(ValueError) as exc:
            load_token_array(tmp_path / name, 2, 4, 3)
        assert re.fullmatch(message, str(exc.value)), (name, str(exc.value))
    ones = np.ones((4, 3))
    ones[0], ones[1] = [0.0, 0.0, 1e-100], [0.0, 1.0, 0.0]  # tiny but not zero; unit
    np.save(tmp_path / "ok.npy", ones.astype(np.float64))
    assert load_token_array(tmp_path / "ok.npy", 2, 4, 3).shape == (4, 3)
    np.save(tmp_path / "int.npy", np.ones((4, 3), dtype=np.uint8))
    assert load_token_array(tmp_path / "int.npy", 2, 4, 3).dtype == np.uint8


# ----------------------------------------------------------------- initial tokens and token files: defaults, any magnitude, format versions


def test_initial_tokens_from_a_seed_and_their_defaults():
    """A ``seed`` is a CPU generator seeded with it (the same tokens as that generator gives); the
    Python defaults are the config's (spread 0.1, cosine 0.5); a float32 pair is float32; neither
    seed nor generator is refused with one message."""
    B, N, d = 2, 3, 4
    g = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    assert torch.equal(uniform(B, N, d, seed=3), uniform(B, N, d, generator=g(3)))
    assert torch.equal(cluster(B, N, d, seed=4), initial_tokens(InitConfig(kind="cluster"), B, N, d, g(4)))
    assert InitConfig().spread == 0.1 and InitConfig().cosine == 0.5
    assert torch.equal(cluster(B, N, d, seed=4), cluster(B, N, d, 0.1, generator=g(4)))
    P = pair(B, d, seed=5)
    assert torch.equal(P, initial_tokens(InitConfig(kind="pair"), B, 2, d, g(5)))
    close((P[:, 0] * P[:, 1]).sum(-1), np.full(B, 0.5))
    close(torch.linalg.vector_norm(P, dim=-1), np.ones((B, 2)))
    P32 = pair(B, d, seed=5, dtype=torch.float32)
    assert P32.dtype == torch.float32
    close((P32[:, 0] * P32[:, 1]).sum(-1).double(), np.full(B, 0.5), 1e-6)
    for make in (lambda: uniform(B, N, d), lambda: cluster(B, N, d), lambda: pair(B, d)):
        with pytest.raises(ValueError, match="^seed: give a seed or a generator$"):
            make()


def test_load_tokens_rows_of_any_magnitude(tmp_path):
    """Each row is scaled by its own largest entry before normalising: rows of 1e200 and 1e-200 in
    one file both come out as unit vectors, without overflow or underflow."""
    arr = np.array([[3e200, 4e200], [3e-200, -4e-200], [1.0, 0.0]])
    np.save(tmp_path / "x.npy", arr)
    close(load_tokens(tmp_path / "x.npy", 1, 3, 2), np.array([[[0.6, 0.8], [0.6, -0.8], [1.0, 0.0]]]))


def test_load_token_array_format_versions_and_truncated_data(tmp_path):
    """A .npy file of format 2.0 is read like 1.0; a file whose header is valid but whose data is
    cut short is refused with the one ``init.path`` message."""
    arr = np.arange(1.0, 13.0).reshape(4, 3)
    with open(tmp_path / "v2.npy", "wb") as fh:
        np.lib.format.write_array(fh, arr, version=(2, 0))
    assert np.array_equal(load_token_array(tmp_path / "v2.npy", 2, 4, 3), arr)
    np.save(tmp_path / "cut.npy", arr)
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-8])
    with pytest.raises(ValueError, match=r"^init\.path: cannot read .*cut\.npy as a \.npy array: .+"):
        load_token_array(tmp_path / "cut.npy", 2, 4, 3)
