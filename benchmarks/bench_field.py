"""The limit SDE (projected Euler) with the random-feature field or the exact field, against the
obvious batched torch code and, where installed, torchsde and diffrax; optionally two checkouts in
alternation, optionally beside processes that each keep one core busy.

    python benchmarks/bench_field.py                          # features: M = 1024, B = 128, N = 64, d = 8, L = 250
    python benchmarks/bench_field.py --problem exact          # exact field: B = 128, N = 32, d = 8, L = 250
    python benchmarks/bench_field.py --load 1                 # beside one process keeping a core busy
    python benchmarks/bench_field.py --before OLD_TREE        # also the checkout OLD_TREE, in alternation
    python benchmarks/bench_field.py --quick --out /tmp/f.json --no-doc   # smallest size, no docs
    python benchmarks/bench_field.py --doc-only               # the docs section again from the JSON

Every run is a fresh ``python`` (``PYTHONPATH`` the tree for stochformer), timed inside the
process after a two-step warm-up (import, thread pools and first allocations excluded); diffrax's
jit compilation is timed apart (its first call less the timed run) and excluded from its time. The contenders'
order alternates from round to round; the medians over rounds are reported, with the ratios to
this checkout. Laws: the mean final cosine ⟨x_i, x_j⟩ (i < j) over the B samples with its
standard error; every contender must agree with this checkout within 3 SEs of the difference.
Two checkouts of stochformer, with the same seed, must give the same final tokens to 1e-12.

All integrate the same Itô SDE dX = [P Attn − κ(1)(d−1)/2 X] dt + P dW (ReLU, σ_U = σ_W = 0,
scale 1), W the problem's field:

- ``features``: W(x) = M^{-1/2} Σ_k relu(u_k·x/√d) B^k, frozen features u, Brownian motions B^k
  (M d per sample);
- ``exact``: the increment at the tokens √dt K(X)^{1/2} Ξ, K_ij = κ(⟨x_i, x_j⟩) with the ReLU
  kernel κ(ρ) = (√(1−ρ²) + (π − arccos ρ) ρ)/(2π d), the symmetric root (an eigendecomposition),
  Ξ (B, N, d).

Contenders: stochformer (``run_simulate``, the default sampler ``rng = auto``: on a CPU the field's
normals from parallel streams), stochformer rng torch (``rng = torch``: ``torch.randn`` on the run's
generator, the default until 0.1.0), torch (a loop over steps, batched over
samples, fresh ``torch.randn`` per step), torchsde (``sdeint``, Euler, the product g(X)·dB given by
``g_prod``, no (B, N d, ·) matrix) and diffrax (``Euler``, a ``ControlTerm`` whose vector field is
a lineax ``FunctionLinearOperator``; for the exact field the root by ``jnp.linalg.eigh``). The
peers do not project on the sphere at each step (they have no projection), so their tokens are
normalised at the end only; the projection changes the law at O(dt), inside the SEs at these sizes
(checked). Optional dependencies: ``pip install stochformer[bench]``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from busy import busy  # noqa: E402
from checkouts import recorded_command, run_in_tree  # noqa: E402
from docsection import publish  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results"
T, BETA, GAMMA = 5.0, 1.0, 1.0
#: per problem: its docs section, default JSON, full and smoke-test sizes
PROBLEMS = {
    "features": {"section": "## Random-feature field SDE", "out": "bench_field.json",
                 "size": dict(features=1024, batch=128, N=64, d=8, L=250), "quick": dict(features=32, batch=4, N=8, d=4, L=5)},
    "exact": {"section": "## Exact-field SDE", "out": "bench_field_exact.json",
              "size": dict(batch=128, N=32, d=8, L=250), "quick": dict(batch=4, N=8, d=4, L=5)},
}
NOTES = {
    "features": "W(x) = M^{-1/2} Σ_k relu(u_k·x/√d) B^k with frozen features u_k; the Brownian normals of a step are "
                "(B, M, d). stochformer: `run_simulate` with `noise = random_features` and the default `rng = auto` (on a CPU the "
                "normals from 4 SFC64 streams seeded from the run's generator, on all cores); stochformer rng torch: "
                "the same with `rng = torch` (`torch.randn`). ",
    "exact": "The increment √dt K(X)^{1/2} Ξ with K_ij = κ(⟨x_i, x_j⟩), κ the ReLU kernel, the symmetric root; "
             "Ξ is (B, N, d). stochformer: `run_simulate` with `noise = exact` and the default `rng = auto` (parallel "
             "streams on a CPU); stochformer rng torch: the same with `rng = torch`. torch: the root by `torch.linalg.eigh`; diffrax: by `jnp.linalg.eigh` inside the "
             "`ControlTerm`'s operator. ",
}
COMMON_NOTE = ("diffrax's compile time is its first call less its timed run. The peers do not project on the sphere "
               "at each step (only at the end); their laws must agree with this checkout's within 3 SEs.")

COMMON = r"""
import json, math, sys, time
import numpy as np
spec, seed, out = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
PROBLEM, RNG, size = spec["problem"], spec["rng"], spec["size"]
B, N, d, L = size["batch"], size["N"], size["d"], size["L"]
M = size.get("features", 0)
T, BETA, GAMMA = %r, %r, %r
dt = T / L
KAPPA1 = 0.5 / d  # relu, sigma_U = sigma_W = 0, scale 1: E[relu(u.x/sqrt d)^2] = 1/(2d)
SHAPE = (B, M, d) if PROBLEM == "features" else (B, N, d)  # the Brownian normals of one step

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

#: the drift and the field of the torch peers (torch, torchsde): field(X, u, Z) is W's increment
#: at X over a unit step given the step's normals Z of SHAPE, u the frozen features (None: exact)
TORCH = r"""
import torch
torch.set_default_dtype(torch.float64)

def tangent(X, V):
    return V - (X * V).sum(-1, keepdim=True) * X

def drift(X):
    attn = torch.softmax(BETA * X @ X.transpose(-1, -2), dim=-1) @ (GAMMA * X)
    return tangent(X, attn) - 0.5 * KAPPA1 * (d - 1) * X

def root(X):
    G = (X @ X.transpose(-1, -2)).clamp(-1.0, 1.0)
    K = (torch.sqrt(1 - G * G) + (math.pi - torch.acos(G)) * G) / (2 * math.pi * d)
    w, V = torch.linalg.eigh(K)
    return (V * w.clamp(min=0).sqrt().unsqueeze(-2)) @ V.transpose(-1, -2)

def features(g):
    return torch.randn(B, d, M, generator=g) if PROBLEM == "features" else None

def field(X, u, Z):
    if PROBLEM == "features":
        return torch.relu(X @ u / math.sqrt(d)) @ Z / math.sqrt(M)
    return root(X) @ Z

def start(g):
    X = torch.randn(B, N, d, generator=g)
    return X / X.norm(dim=-1, keepdim=True)
"""

CHILDREN = {
    "stochformer": r"""
from stochformer.config import RunConfig
from stochformer.experiments.simulate import run_simulate
noise = {"noise": "random_features", "features": M} if PROBLEM == "features" else {"noise": "exact"}
cfg = RunConfig(dynamics="sde", integrator="euler", batch=B, N=N, d=d, L=L, T=T, beta=BETA, gamma=GAMMA,
                activation="relu", seed=seed, record_every=L, **noise, **({"rng": RNG} if RNG else {}))
run_simulate(cfg.with_updates(L=2, T=2 * dt))
start = time.perf_counter()
res = run_simulate(cfg)
report(time.perf_counter() - start, res.data["X_final"].values)
""",
    "torch": TORCH + r"""
def run(steps, g):
    X = start(g)
    u = features(g)
    for _ in range(steps):
        Z = torch.randn(*SHAPE, generator=g)
        X = X + dt * drift(X) + tangent(X, math.sqrt(dt) * field(X, u, Z))
        X = X / X.norm(dim=-1, keepdim=True)
    return X

run(2, torch.Generator().manual_seed(seed))
t0 = time.perf_counter()
X = run(L, torch.Generator().manual_seed(seed))
report(time.perf_counter() - t0, X.numpy())
""",
    "torchsde": TORCH + r"""
import torchsde

class FieldSDE(torch.nn.Module):
    noise_type, sde_type = "general", "ito"

    def __init__(self, u):
        super().__init__()
        self.u = u

    def f(self, t, y):
        return drift(y.view(B, N, d)).reshape(B, N * d)

    def g_prod(self, t, y, v):
        X = y.view(B, N, d)
        return tangent(X, field(X, self.u, v.view(SHAPE))).reshape(B, N * d)

def run(steps, g):
    X = start(g)
    sde = FieldSDE(features(g))
    ts = torch.tensor([0.0, steps * dt])
    bm = torchsde.BrownianInterval(0.0, steps * dt, size=(B, SHAPE[1] * d), dtype=torch.float64, entropy=seed,
                                   levy_area_approximation="none")
    return torchsde.sdeint(sde, X.reshape(B, N * d), ts, bm=bm, method="euler", dt=dt)[-1].view(B, N, d)

run(2, torch.Generator().manual_seed(seed))
t0 = time.perf_counter()
X = run(L, torch.Generator().manual_seed(seed))
report(time.perf_counter() - t0, X.numpy())
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

def root(X):
    G = jnp.clip(X @ jnp.swapaxes(X, -1, -2), -1.0, 1.0)
    K = (jnp.sqrt(1 - G * G) + (jnp.pi - jnp.arccos(G)) * G) / (2 * jnp.pi * d)
    w, V = jnp.linalg.eigh(K)
    return (V * jnp.sqrt(jnp.clip(w, 0.0))[..., None, :]) @ jnp.swapaxes(V, -1, -2)

def diffusion(t, X, u):
    S = jax.nn.relu(X @ u / math.sqrt(d)) / math.sqrt(M) if PROBLEM == "features" else root(X)
    return lineax.FunctionLinearOperator(lambda V: tangent(X, S @ V), jax.ShapeDtypeStruct(SHAPE, jnp.float64))

@jax.jit
def run(key):
    k0, k1, k2 = jax.random.split(key, 3)
    X = jax.random.normal(k0, (B, N, d))
    X = X / jnp.linalg.norm(X, axis=-1, keepdims=True)
    u = jax.random.normal(k1, (B, d, M)) if PROBLEM == "features" else None
    bm = diffrax.UnsafeBrownianPath(shape=SHAPE, key=k2)
    terms = diffrax.MultiTerm(diffrax.ODETerm(drift), diffrax.ControlTerm(diffusion, bm))
    sol = diffrax.diffeqsolve(terms, diffrax.Euler(), 0.0, T, dt, X, args=u, saveat=diffrax.SaveAt(t1=True), max_steps=L + 1,
                              adjoint=diffrax.ForwardMode())
    return sol.ys[-1]

t0 = time.perf_counter()
run(jax.random.PRNGKey(seed + 1)).block_until_ready()
first = time.perf_counter() - t0  # compilation and one run
t0 = time.perf_counter()
X = run(jax.random.PRNGKey(seed)).block_until_ready()
seconds = time.perf_counter() - t0
report(seconds, np.asarray(X), max(first - seconds, 0.0))
""",
}
NEEDS = {"torchsde": "torchsde", "diffrax": "diffrax"}
#: the stochformer contenders of this checkout: name → the field's sampler (None: the default)
OURS = {"stochformer": None, "stochformer rng torch": "torch"}


def available(name: str) -> bool:
    """Whether the peer ``name``'s package is installed (stochformer and torch always are)."""
    return name not in NEEDS or importlib.util.find_spec(NEEDS[name]) is not None


def run_child(name: str, problem: str, size: dict, rng, seed: int, out: Path, tree: Path) -> dict:
    """One timed run of contender ``name`` (a key of CHILDREN) in a fresh process; its report."""
    spec = json.dumps({"problem": problem, "rng": rng, "size": size})
    return run_in_tree(COMMON + CHILDREN[name], [spec, str(seed), str(out)], tree, env={"JAX_PLATFORMS": "cpu"})


def render(result: dict) -> str:
    """The docs section of one result (the JSON this script writes)."""
    problem, size, rounds = result.get("problem", "features"), result["size"], result["rounds"]
    load = result.get("load_processes", 0)
    beside = (f", beside {load} process{'es' if load > 1 else ''} each keeping one core busy (`--load {load}`)" if load
              else "")
    lb, la = result.get("load_before"), result.get("load_after")
    loads = f"load {lb:.1f} → {la:.1f}" if lb is not None and la is not None else "load not recorded"
    sizes = (f"M = {size['features']}, " if problem == "features" else "") + \
        f"B = {size['batch']}, N = {size['N']}, d = {size['d']}, L = {size['L']} Euler steps"
    lines = [f"{section(problem, load)}\n",
             f"`{result['command']}` on {result['device']} ({result['platform']}), {result['date']}, {loads}{beside}; "
             f"{sizes}, float64, {rounds} round{'s' if rounds > 1 else ''} in alternation, fresh processes (medians).\n",
             "| contender | seconds | × stochformer (range) | mean final cosine ± SE | law |", "|---|---|---|---|---|"]
    for name, e in result["contenders"].items():
        extra = f" (+ {statistics.median(e['compile_seconds']):.1f} s compile)" if "compile_seconds" in e else ""
        lines.append(f"| {name} | {e['median_seconds']:.2f}{extra} | {e['time_over_stochformer']:.2f} ({e['ratio_range'][0]:.2f}–"
                     f"{e['ratio_range'][1]:.2f}) | {e['cosine']:.4f} ± {e['cosine_se']:.4f} | "
                     f"{'agrees' if e['law_agrees'] else 'DIFFERS'} ({e['max_cosine_diff_in_se']:.1f} SE) |")
    quiet = result.get("quiet")
    if quiet:
        lines.append(f"\nSlow-down against the run without load ({quiet['date']}, `{quiet['command']}`), each contender's "
                     "median over its own: " + ", ".join(f"{name} {e['median_seconds'] / quiet['seconds'][name]:.2f}×"
                                                        for name, e in result["contenders"].items() if name in quiet["seconds"])
                     + ". With one of 2 cores taken, a fair share is a slow-down of up to about 2×.")
    if "final_tokens_equal_to_1e-12" in result:
        lines.append("\nstochformer before: another checkout of stochformer (`--before`), run in alternation with this one; "
                     f"the two checkouts' final tokens {'agree to 1e-12' if result['final_tokens_equal_to_1e-12'] else 'DIFFER'}.")
    if result.get("skipped"):
        lines.append("\nNot run: " + ", ".join(f"{p} ({why})" for p, why in result["skipped"].items()) + ".")
    lines.append("\n" + NOTES[problem] + COMMON_NOTE)
    return "\n".join(lines) + "\n"


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Per contender: times, their medians and ratios to stochformer's, the law's cosine and its
    agreement with stochformer's (within 3 SEs of the difference, every round)."""
    ref, out = runs["stochformer"], {}
    for name, rs in runs.items():
        cos, se = statistics.mean(x["cosine"] for x in rs), statistics.mean(x["cosine_se"] for x in rs)
        diff = [abs(x["cosine"] - y["cosine"]) / max((x["cosine_se"] ** 2 + y["cosine_se"] ** 2) ** 0.5, 1e-300) for x, y in zip(rs, ref)]
        ratios = [x["seconds"] / y["seconds"] for x, y in zip(rs, ref)]
        entry = {"seconds": [x["seconds"] for x in rs], "median_seconds": statistics.median(x["seconds"] for x in rs),
                 "time_over_stochformer": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)],
                 "cosine": cos, "cosine_se": se, "max_cosine_diff_in_se": max(diff) if name != "stochformer" else 0.0,
                 "law_agrees": all(z <= 3.0 for z in diff)}
        if any(x["compile_seconds"] is not None for x in rs):
            entry["compile_seconds"] = [x["compile_seconds"] for x in rs]
        out[name] = entry
    return out


def section(problem: str, load: int) -> str:
    """The docs section of a problem's results, alone or beside ``load`` busy cores."""
    title = PROBLEMS[problem]["section"]
    return title if not load else f"{title} beside {load} busy core{'s' if load > 1 else ''}"


def main(argv=None) -> dict:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", choices=sorted(PROBLEMS), default="features", help="the field (default: features)")
    parser.add_argument("--before", type=Path, default=None, help="another checkout of stochformer, run in alternation")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the smallest size, one round (a smoke test)")
    parser.add_argument("--peers", default="torch,torchsde,diffrax", help="comma-separated; absent packages are skipped")
    parser.add_argument("--load", type=int, default=0, metavar="K",
                        help="run beside K processes that each keep one core busy (started before the rounds, killed after)")
    parser.add_argument("--out", type=Path, default=None, help="JSON results (default: benchmarks/results/<problem's file>)")
    parser.add_argument("--no-doc", action="store_true", help="do not write the section of docs/benchmarks.md")
    parser.add_argument("--doc-only", action="store_true", help="write the docs section from the JSON at --out, run nothing")
    parser.add_argument("--work", type=Path, default=None, help="folder of the runs' final tokens (default: next to --out)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds: must be an integer >= 1 (got {args.rounds})")
    if args.load < 0:
        parser.error(f"--load: must be an integer >= 0 (got {args.load})")
    problem = PROBLEMS[args.problem]
    out = args.out or RESULTS / (problem["out"] if not args.load else problem["out"].replace(".json", f"_load{args.load}.json"))
    if args.doc_only:
        result = json.loads(out.read_text())
        publish(DOC, section(result["problem"], result["load_processes"]), render(result), write=not args.no_doc)
        return result
    size, rounds = (problem["quick"], 1) if args.quick else (problem["size"], args.rounds)
    work = args.work or out.parent / f"{out.stem}_work"
    work.mkdir(parents=True, exist_ok=True)
    contenders = [(name, ROOT, rng) for name, rng in OURS.items()]
    contenders += [("stochformer before", args.before, None)] if args.before else []
    peers = [p for p in args.peers.split(",") if p]
    skipped = [p for p in peers if not available(p)]
    contenders += [(p, ROOT, None) for p in peers if available(p)]
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in contenders}
    load_before = os.getloadavg()[0]
    same_tokens = True
    with busy(args.load):
        for r in range(rounds):
            order = contenders if r % 2 == 0 else contenders[::-1]
            for name, tree, rng in order:
                kind = "stochformer" if name.startswith("stochformer") else name
                runs[name].append(run_child(kind, args.problem, size, rng, 1000 + r, work / f"{name.replace(' ', '_')}.npy", tree))
            if args.before:
                same_tokens &= bool(np.allclose(np.load(work / "stochformer.npy"), np.load(work / "stochformer_before.npy"),
                                                rtol=1e-12, atol=1e-12))
        load_after = os.getloadavg()[0]
    result = {"benchmark": out.stem, "problem": args.problem,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores", "platform": platform.platform(),
              "python": platform.python_version(), "command": recorded_command("benchmarks/bench_field.py", argv if argv is not None else sys.argv[1:]),
              "size": size, "T": T, "beta": BETA, "gamma": GAMMA, "integrator": "euler", "dtype": "float64", "rounds": rounds,
              "load_processes": args.load, "load_before": load_before, "load_after": load_after,
              "skipped": {p: f"{NEEDS[p]} not installed" for p in skipped}, "contenders": summarise(runs)}
    if args.before:
        result["final_tokens_equal_to_1e-12"] = same_tokens
    quiet_file = RESULTS / problem["out"]
    if args.load and not args.quick and quiet_file.exists():
        q = json.loads(quiet_file.read_text())
        if q.get("size") == size and not q.get("load_processes"):
            result["quiet"] = {"date": q["date"], "command": q["command"],
                               "seconds": {name: e["median_seconds"] for name, e in q["contenders"].items()}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    publish(DOC, section(args.problem, args.load), render(result), write=not (args.no_doc or args.quick))
    return result


if __name__ == "__main__":
    main()
