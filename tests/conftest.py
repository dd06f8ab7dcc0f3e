"""Shared fixtures and helpers: small token clouds, generators whose draws a test can replay, the
float32 reference config, and `close` (``from conftest import TOL, close``), the 1e-12 comparison
of the pathwise and exact tests."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

#: the mutation tool's first pass (tools/mutation.toml, ``fast_tests``): the pathwise and exact
#: tests, marked ``fast`` here so that ``pytest -m fast`` is the same loop (about half a minute)
FAST_TESTS = tuple(tomllib.loads((Path(__file__).resolve().parents[1] / "tools" / "mutation.toml").read_text(encoding="utf-8"))
                   ["mutation"]["fast_tests"])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``fast`` every test the mutation tool's first pass runs (a listed file, or a listed
    test with all its parameters)."""
    root = Path(config.rootpath)
    for item in items:
        node = Path(item.path).resolve().relative_to(root).as_posix() + "::" + item.name.split("[")[0]
        if any(node == entry or node.startswith(entry + "::") for entry in FAST_TESTS):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True, scope="session")
def _cache_key_dir(tmp_path_factory):
    """The key that signs cache entries lives in a folder of the test session (never the user's
    config folder); subprocesses inherit it."""
    mp = pytest.MonkeyPatch()
    mp.setenv("STOCHFORMER_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
    yield
    mp.undo()


#: the agreement of the pathwise and exact tests with their references (float64)
TOL = 1e-12


def close(got, ref, tol: float = TOL) -> None:
    """``got`` (a tensor or an array) equals ``ref`` (a tensor or an array) in shape and to ``tol``
    in every entry (compared in float64)."""
    got = got.detach().cpu().double().numpy() if torch.is_tensor(got) else np.asarray(got)
    ref = ref.detach().cpu().double().numpy() if torch.is_tensor(ref) else np.asarray(ref)
    assert got.shape == ref.shape, f"shape {got.shape}, reference {ref.shape}"
    err = float(np.max(np.abs(got - ref)))
    assert err < tol, f"max |code − reference| = {err:.3g}"


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


@pytest.fixture
def float32_reference():
    """The config of the float32 checks (tests/test_sync.py, tests/test_motions.py): d = 5,
    σ_U = σ_W = 0.1, ReLU, width 256, no attention, T = 5, L = 100, seed 3; λ₁ = −0.13 (SPEC §5,
    Proposition 1.5)."""
    from stochformer.config import RunConfig

    return RunConfig(d=5, sigma_U=0.1, sigma_W=0.1, m=256, T=5.0, L=100, attention=False, seed=3)


#: address space a module's process may add under ``bounded_address_space``: a hostile size then
#: fails to allocate (a clean error) instead of bringing the machine's memory down
HEADROOM = 6 << 30


@pytest.fixture(scope="module")
def bounded_address_space():
    """From its first use to the end of the module, the process runs under an address-space limit
    of what it maps now + HEADROOM (tests of refusals of huge sizes: a regression that allocates
    fails with a MemoryError instead of exhausting the machine)."""
    try:
        import resource

        with open("/proc/self/status") as fh:
            vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    except (ImportError, OSError, StopIteration):
        yield
        return
    old = resource.getrlimit(resource.RLIMIT_AS)
    limit = vm + HEADROOM if old[1] == resource.RLIM_INFINITY else min(vm + HEADROOM, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)
