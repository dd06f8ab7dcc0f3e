"""Tokens read from a .npy file: shared or per sample, normalised, and every bad array refused
with one message that names ``init.path``."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from stochformer.io.tokens import load_token_array, load_tokens


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
