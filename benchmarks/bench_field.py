"""The limit SDE with the random-feature field (projected Euler), against the obvious batched
torch code and, where installed, torchsde and diffrax; optionally two checkouts in alternation.

    python benchmarks/bench_field.py                          # M = 1024, B = 128, N = 64, d = 8, L = 250
    python benchmarks/bench_field.py --before OLD_TREE        # also the checkout OLD_TREE, in alternation
    python benchmarks/bench_field.py --quick --out /tmp/f.json --no-doc   # smallest size, no docs

Every run is a fresh ``python`` (``PYTHONPATH`` the tree for stochformer), timed inside the
process after a two-step warm-up (import, thread pools and first allocations excluded); diffrax's
jit compilation is timed apart (its first call less the timed run) and excluded from its time. The contenders'
order alternates from round to round; the medians over rounds are reported, with the ratios to
this checkout. Laws: the mean final cosine ⟨x_i, x_j⟩ (i < j) over the B samples with its
standard error; every contender must agree with this checkout within 3 SEs of the difference.
Two checkouts of stochformer, with the same seed, must give the same final tokens to 1e-12.

The peers integrate the same Itô SDE dX = [P Attn − κ(1)(d−1)/2 X] dt + P dW, W the same field
(features u, b, Brownian motions B^k, M d per sample): torchsde (``sdeint``, Euler, the product
g(X)·dB given by ``g_prod``, no (B, N d, M d) matrix) and diffrax (``Euler``, a ``ControlTerm``
whose vector field is a lineax ``FunctionLinearOperator``); neither projects on the sphere at
each step (they have no projection), so their tokens are normalised at the end only; the
projection changes the law at O(dt), inside the SEs at these sizes (checked).
Optional dependencies: ``pip install stochformer[bench]``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import publish  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Random-feature field SDE"
SIZE = dict(features=1024, batch=128, N=64, d=8, L=250)
QUICK = dict(features=32, batch=4, N=8, d=4, L=5)
T, BETA, GAMMA = 5.0, 1.0, 1.0

COMMON = r"""
import json, math, sys, time
import numpy as np
size, seed, out = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
B, N, d, M, L = size["batch"], size["N"], size["d"], size["features"], size["L"]
T, BETA, GAMMA = %r, %r, %r
dt = T / L
KAPPA1 = 0.5 / d  # relu, sigma_U = sigma_W = 0, scale 1: E[relu(u.x/sqrt d)^2] = 1/(2d)

def report(seconds, X, compile_seconds=None):
    X = np.asarray(X, dtype=np.float64)
    X = X / np.linalg.norm(X, axis=-1, keepdims=True)
    G = X @ np.swapaxes(X, -1, -2)
    iu = np.triu_indices(N, 1)
    cos = G[:, iu[0], iu[1]].mean(-1)
    np.save(out, X)
    print(json.dumps({"seconds": seconds, "compile_seconds": compile_seconds,
                      "cosine": float(cos.mean()), "cosine_se": float(cos.std(ddof=1) / math.sqrt(len(cos))) if len(cos) > 1 else 0.0}))
""" % (T, BETA, GAMMA)

CHILDREN = {
    "stochformer": r"""
from stochformer.config import RunConfig
from stochformer.experiments.simulate import run_simulate
cfg = RunConfig(dynamics="sde", noise="random_features", integrator="euler", features=M, batch=B, N=N, d=d, L=L, T=T,
                beta=BETA, gamma=GAMMA, activation="relu", seed=seed, record_every=L)
run_simulate(cfg.with_updates(L=2, T=2 * dt))
start = time.perf_counter()
res = run_simulate(cfg)
report(time.perf_counter() - start, res.data["X_final"].values)
""",
    "torch": r"""
import torch
torch.set_default_dtype(torch.float64)

def tangent(X, V):
    return V - (X * V).sum(-1, keepdim=True) * X

def run(steps, g):
    X = torch.randn(B, N, d, generator=g)
    X = X / X.norm(dim=-1, keepdim=True)
    u = torch.randn(B, d, M, generator=g)
    for _ in range(steps):
        attn = torch.softmax(BETA * X @ X.transpose(-1, -2), dim=-1) @ (GAMMA * X)
        Z = torch.randn(B, M, d, generator=g)
        dW = math.sqrt(dt / M) * (torch.relu(X @ u / math.sqrt(d)) @ Z)
        X = X + dt * (tangent(X, attn) - 0.5 * KAPPA1 * (d - 1) * X) + tangent(X, dW)
        X = X / X.norm(dim=-1, keepdim=True)
    return X

run(2, torch.Generator().manual_seed(seed))
start = time.perf_counter()
X = run(L, torch.Generator().manual_seed(seed))
report(time.perf_counter() - start, X.numpy())
""",
    "torchsde": r"""
import torch, torchsde
torch.set_default_dtype(torch.float64)

class FieldSDE(torch.nn.Module):
    noise_type, sde_type = "general", "ito"

    def __init__(self, u):
        super().__init__()
        self.u = u

    def f(self, t, y):
        X = y.view(B, N, d)
        attn = torch.softmax(BETA * X @ X.transpose(-1, -2), dim=-1) @ (GAMMA * X)
        V = attn - (X * attn).sum(-1, keepdim=True) * X
        return (V - 0.5 * KAPPA1 * (d - 1) * X).reshape(B, N * d)

    def g_prod(self, t, y, v):
        X = y.view(B, N, d)
        W = (torch.relu(X @ self.u / math.sqrt(d)) @ v.view(B, M, d)) / math.sqrt(M)
        return (W - (X * W).sum(-1, keepdim=True) * X).reshape(B, N * d)

def run(steps, g):
    X = torch.randn(B, N, d, generator=g)
    X = X / X.norm(dim=-1, keepdim=True)
    sde = FieldSDE(torch.randn(B, d, M, generator=g))
    ts = torch.tensor([0.0, steps * dt])
    bm = torchsde.BrownianInterval(0.0, steps * dt, size=(B, M * d), dtype=torch.float64, entropy=seed, levy_area_approximation="none")
    return torchsde.sdeint(sde, X.reshape(B, N * d), ts, bm=bm, method="euler", dt=dt)[-1].view(B, N, d)

run(2, torch.Generator().manual_seed(seed))
start = time.perf_counter()
X = run(L, torch.Generator().manual_seed(seed))
report(time.perf_counter() - start, X.numpy())
""",
    "diffrax": r"""
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, diffrax, lineax

def tangent(X, V):
    return V - (X * V).sum(-1, keepdims=True) * X

def drift(t, X, u):
    attn = jax.nn.softmax(BETA * X @ jnp.swapaxes(X, -1, -2), axis=-1) @ (GAMMA * X)
    return tangent(X, attn) - 0.5 * KAPPA1 * (d - 1) * X

def diffusion(t, X, u):
    phi = jax.nn.relu(X @ u / math.sqrt(d)) / math.sqrt(M)
    return lineax.FunctionLinearOperator(lambda V: tangent(X, phi @ V), jax.ShapeDtypeStruct((B, M, d), jnp.float64))

@jax.jit
def run(key):
    k0, k1, k2 = jax.random.split(key, 3)
    X = jax.random.normal(k0, (B, N, d))
    X = X / jnp.linalg.norm(X, axis=-1, keepdims=True)
    u = jax.random.normal(k1, (B, d, M))
    bm = diffrax.UnsafeBrownianPath(shape=(B, M, d), key=k2)
    terms = diffrax.MultiTerm(diffrax.ODETerm(drift), diffrax.ControlTerm(diffusion, bm))
    sol = diffrax.diffeqsolve(terms, diffrax.Euler(), 0.0, T, dt, X, args=u, saveat=diffrax.SaveAt(t1=True), max_steps=L + 1,
                              adjoint=diffrax.ForwardMode())
    return sol.ys[-1]

start = time.perf_counter()
run(jax.random.PRNGKey(seed + 1)).block_until_ready()
first = time.perf_counter() - start  # compilation and one run
start = time.perf_counter()
X = run(jax.random.PRNGKey(seed)).block_until_ready()
seconds = time.perf_counter() - start
report(seconds, np.asarray(X), max(first - seconds, 0.0))
""",
}
NEEDS = {"torchsde": "torchsde", "diffrax": "diffrax"}


def available(name: str) -> bool:
    """Whether the peer ``name``'s package is installed (stochformer and torch always are)."""
    return name not in NEEDS or importlib.util.find_spec(NEEDS[name]) is not None


def run_child(name: str, size: dict, seed: int, out: Path, tree: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", COMMON + CHILDREN[name], json.dumps(size), str(seed), str(out)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} ({tree}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, default=None, help="another checkout of stochformer, run in alternation")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the smallest size, one round (a smoke test)")
    parser.add_argument("--peers", default="torch,torchsde,diffrax", help="comma-separated; absent packages are skipped")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_field.json", help="JSON results")
    parser.add_argument("--no-doc", action="store_true", help="do not write the section of docs/benchmarks.md")
    parser.add_argument("--work", type=Path, default=None, help="folder of the runs' final tokens (default: next to --out)")
    args = parser.parse_args(argv)
    size, rounds = (QUICK, 1) if args.quick else (SIZE, args.rounds)
    work = args.work or args.out.parent / "bench_field_work"
    work.mkdir(parents=True, exist_ok=True)
    contenders = [("stochformer", ROOT)] + ([("stochformer before", args.before)] if args.before else [])
    skipped = [p for p in args.peers.split(",") if p and not available(p)]
    contenders += [(p, ROOT) for p in args.peers.split(",") if p and available(p)]
    runs: dict[str, list[dict]] = {name: [] for name, _ in contenders}
    load_before = os.getloadavg()[0]
    same_tokens = True
    for r in range(rounds):
        order = contenders if r % 2 == 0 else contenders[::-1]
        for name, tree in order:
            kind = "stochformer" if name.startswith("stochformer") else name
            runs[name].append(run_child(kind, size, 1000 + r, work / f"{name.replace(' ', '_')}.npy", tree))
        if args.before:
            same_tokens &= bool(np.allclose(np.load(work / "stochformer.npy"), np.load(work / "stochformer_before.npy"), rtol=1e-12, atol=1e-12))
    ref = runs["stochformer"]
    result = {"benchmark": "bench_field", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores", "platform": platform.platform(),
              "python": platform.python_version(), "command": "python benchmarks/bench_field.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "size": size, "T": T, "beta": BETA, "gamma": GAMMA, "integrator": "euler", "dtype": "float64", "rounds": rounds,
              "load_before": load_before, "skipped": {p: f"{NEEDS[p]} not installed" for p in skipped}, "contenders": {}}
    for name, _ in contenders:
        rs = runs[name]
        cos, se = statistics.mean(x["cosine"] for x in rs), statistics.mean(x["cosine_se"] for x in rs)
        diff = [abs(x["cosine"] - y["cosine"]) / max((x["cosine_se"] ** 2 + y["cosine_se"] ** 2) ** 0.5, 1e-300) for x, y in zip(rs, ref)]
        ratios = [x["seconds"] / y["seconds"] for x, y in zip(rs, ref)]
        entry = {"seconds": [x["seconds"] for x in rs], "median_seconds": statistics.median(x["seconds"] for x in rs),
                 "time_over_stochformer": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)],
                 "cosine": cos, "cosine_se": se, "max_cosine_diff_in_se": max(diff) if name != "stochformer" else 0.0,
                 "law_agrees": all(z <= 3.0 for z in diff)}
        if any(x["compile_seconds"] is not None for x in rs):
            entry["compile_seconds"] = [x["compile_seconds"] for x in rs]
        result["contenders"][name] = entry
    if args.before:
        result["final_tokens_equal_to_1e-12"] = same_tokens
    result["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"{SECTION}\n", f"`{result['command']}` on {result['device']} ({result['platform']}), {result['date']}, load "
             f"{result['load_before']:.1f} → {result['load_after']:.1f}; M = {size['features']}, B = {size['batch']}, "
             f"N = {size['N']}, d = {size['d']}, L = {size['L']} Euler steps, float64, {rounds} rounds in alternation, "
             "fresh processes (medians).\n", "| contender | seconds | × stochformer (range) | mean final cosine ± SE | law |",
             "|---|---|---|---|---|"]
    for name, e in result["contenders"].items():
        extra = f" (+ {statistics.median(e['compile_seconds']):.1f} s compile)" if "compile_seconds" in e else ""
        lines.append(f"| {name} | {e['median_seconds']:.2f}{extra} | {e['time_over_stochformer']:.2f} ({e['ratio_range'][0]:.2f}–"
                     f"{e['ratio_range'][1]:.2f}) | {e['cosine']:.4f} ± {e['cosine_se']:.4f} | "
                     f"{'agrees' if e['law_agrees'] else 'DIFFERS'} ({e['max_cosine_diff_in_se']:.1f} SE) |")
    if args.before:
        lines.append(f"\nThe two checkouts' final tokens {'agree to 1e-12' if same_tokens else 'DIFFER'}.")
    if skipped:
        lines.append("\nNot run: " + ", ".join(f"{p} ({NEEDS[p]} not installed)" for p in skipped) + ".")
    publish(DOC, SECTION, "\n".join(lines) + "\n", write=not (args.no_doc or args.quick))
    return result


if __name__ == "__main__":
    main()
