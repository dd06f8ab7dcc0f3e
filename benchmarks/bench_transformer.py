"""Transformer simulator benchmark: ``stochformer`` against the batched loops a researcher writes.

    python benchmarks/bench_transformer.py                      # CPU; writes the "Transformer simulator" section of docs/benchmarks.md
    python benchmarks/bench_transformer.py --device cuda --out DIR   # GPU; writes DIR/bench_transformer_cuda.{md,json}
    python benchmarks/bench_transformer.py --device cpu --quick --out DIR   # small sizes, a smoke test
    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_transformer.py --load 1  # a shared machine: one core taken
    python benchmarks/bench_transformer.py --before OLD_TREE     # also OLD_TREE's stochformer against this one

The yardsticks simulate the discrete model of SPEC §1 (post-LN, attention then a random ReLU MLP
with fresh U, W, b_U, b_W per layer and per sample) the way a researcher writes it in fifteen
lines: a loop over layers, batched over samples, fresh ``torch.randn`` (or numpy) weights per
layer. All implementations run at the same sizes in one process, in alternation, repeat after
repeat (different seeds); their laws are compared on the final tokens. Whole-process figures
(a fresh ``python`` running each, start-up included) are measured separately, as subprocesses.
A roofline at each size divides the normals and the matrix-product flops one run must produce by
the rates measured on this machine.

``--load K`` runs every timing beside K processes that each keep one core busy (``busy.py``): a
machine shared with other jobs. Its results go to their own JSON file and section ("on a shared
machine"); set ``OMP_WAIT_POLICY`` (read when torch loads, recorded) for the waiting policy wanted.
``--before TREE`` also times stochformer of the checkout TREE against this checkout, both in fresh
processes, in alternation, with the same seeds (``checkouts.py``): the ratio before/after with the
range of the rounds' ratios, and whether the final tokens agree to 1e-12. The JSON file is written
first (``benchmarks/results/bench_transformer_<device>[_shared].json``) and the section of
docs/benchmarks.md is generated from it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from busy import busy  # noqa: E402
from checkouts import alternate, ratio_summary, recorded_command, tree_commit  # noqa: E402
from docsection import write_section  # noqa: E402

from stochformer.config.build import make_model  # noqa: E402
from stochformer.config import RunConfig  # noqa: E402
from stochformer.measure.diagnostics import mean_cosine  # noqa: E402
from stochformer.experiments.simulate import run_simulate  # noqa: E402
from stochformer.model.rng import NormalDraws  # noqa: E402
from stochformer.core.runtime import make_generator  # noqa: E402
from stochformer.core.sphere import uniform  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results"
SECTION = "## Transformer simulator"  # the CPU numbers; a GPU run writes its own files
SHARED_SECTION = "## Transformer simulator on a shared machine"  # the CPU numbers under --load K
SIZES = [dict(batch=64, N=32, d=16, m=256, L=128), dict(batch=16, N=64, d=64, m=1024, L=64)]
QUICK_SIZES = [dict(batch=8, N=8, d=4, m=32, L=8), dict(batch=4, N=16, d=16, m=64, L=8)]
LARGE_SIZE = dict(batch=256, N=256, d=64, m=1024, L=256)  # --large: a size for a GPU
MODEL = dict(T=5.0, beta=1.0, gamma=1.0, activation="relu", sigma_U=0.1, sigma_W=0.1)


# --------------------------------------------------------------------------------------------
# the yardsticks: what a researcher writes (a loop over layers, batched over samples)
# --------------------------------------------------------------------------------------------
def torch_loop(X: torch.Tensor, L: int, T: float, m: int, beta: float, gamma: float, sU: float, sW: float, gen: torch.Generator,
               draws: torch.dtype | None = None) -> torch.Tensor:
    """Post-LN transformer with a random ReLU MLP, fresh weights per layer and sample: X (B, N, d).
    The normals are drawn in ``draws`` (default: X's dtype) and cast to X's dtype."""
    B, N, d = X.shape
    dt = T / L
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=draws or X.dtype, device=X.device).to(X.dtype)  # noqa: E731
    for _ in range(L):
        Y = X + dt * gamma * (torch.softmax(beta * X @ X.transpose(1, 2), dim=-1) @ X)
        Y = Y / Y.norm(dim=-1, keepdim=True)
        U, W, bU, bW = randn(B, m, d), randn(B, d, m), randn(B, 1, m), randn(B, 1, d)
        H = torch.relu(Y @ U.transpose(1, 2) / math.sqrt(d) + sU * bU)
        X = Y + math.sqrt(dt) * (H @ W.transpose(1, 2) / math.sqrt(m) + sW * bW)
        X = X / X.norm(dim=-1, keepdim=True)
    return X


def numpy_loop(X: np.ndarray, L: int, T: float, m: int, beta: float, gamma: float, sU: float, sW: float, rng: np.random.Generator) -> np.ndarray:
    """The same loop in NumPy (PCG64 ziggurat normals, stacked matmul)."""
    B, N, d = X.shape
    dt = T / L
    for _ in range(L):
        S = beta * X @ X.transpose(0, 2, 1)
        P = np.exp(S - S.max(axis=-1, keepdims=True))
        Y = X + dt * gamma * ((P / P.sum(axis=-1, keepdims=True)) @ X)
        Y /= np.linalg.norm(Y, axis=-1, keepdims=True)
        U, W = rng.standard_normal((B, m, d)), rng.standard_normal((B, d, m))
        bU, bW = rng.standard_normal((B, 1, m)), rng.standard_normal((B, 1, d))
        H = np.maximum(Y @ U.transpose(0, 2, 1) / math.sqrt(d) + sU * bU, 0.0)
        X = Y + math.sqrt(dt) * (H @ W.transpose(0, 2, 1) / math.sqrt(m) + sW * bW)
        X /= np.linalg.norm(X, axis=-1, keepdims=True)
    return X


# --------------------------------------------------------------------------------------------
# timing helpers
# --------------------------------------------------------------------------------------------
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def median_time(fn, device: torch.device, repeats: int) -> float:
    return statistics.median(timed(fn, device)[1] for _ in range(repeats))


def config_fields(size: dict, device: str) -> dict:
    """The ``RunConfig`` fields (all but the seed) of a run at ``size``: the model, one record at the end."""
    return {**size, **MODEL, "device": device, "record_every": size["L"]}


def run_config(size: dict, device: str, seed: int, **extra) -> RunConfig:
    return RunConfig(**config_fields(size, device), seed=seed, **extra)


def initial(cfg: RunConfig, device: torch.device, dtype=torch.float64) -> tuple[torch.Tensor, torch.Generator]:
    gen = make_generator(cfg.seed, device)
    return uniform(cfg.batch, cfg.N, cfg.d, generator=gen, dtype=dtype, device=device), gen


def run_torch(cfg: RunConfig, device: torch.device, dtype=torch.float64, draws: torch.dtype | None = None) -> torch.Tensor:
    X0, gen = initial(cfg, device, dtype)
    return torch_loop(X0, cfg.L, cfg.T, cfg.m, cfg.beta, cfg.gamma_value, cfg.sigma_U, cfg.sigma_W, gen, draws)


def run_numpy(cfg: RunConfig) -> torch.Tensor:
    X0 = initial(cfg, torch.device("cpu"))[0].numpy()
    rng = np.random.default_rng(cfg.seed)
    return torch.from_numpy(numpy_loop(X0, cfg.L, cfg.T, cfg.m, cfg.beta, cfg.gamma_value, cfg.sigma_U, cfg.sigma_W, rng))


def run_ours(cfg: RunConfig) -> torch.Tensor:
    return torch.from_numpy(run_simulate(cfg).data["X_final"].values)


#: the implementations timed in alternation: name → run(cfg, device) → final tokens
IMPLEMENTATIONS = {
    "torch loop": lambda cfg, dev: run_torch(cfg, dev),
    "torch loop, float32 draws": lambda cfg, dev: run_torch(cfg, dev, draws=torch.float32),
    "NumPy loop": lambda cfg, dev: run_numpy(cfg),
    "stochformer": lambda cfg, dev: run_ours(cfg),
    "stochformer, float32 draws": lambda cfg, dev: run_ours(cfg.with_updates(draw_precision="float32")),
    "torch loop, float32": lambda cfg, dev: run_torch(cfg, dev, torch.float32),
    "stochformer, float32": lambda cfg, dev: run_ours(cfg.with_updates(dtype="float32")),
    # every layer between the two records replayed as CUDA graphs (solve(capture=True)); on a CPU the
    # traced replay, slower there: timed only on CUDA and in --quick (the smoke test of the path)
    "stochformer, captured": lambda cfg, dev: run_ours(cfg.with_updates(capture=True)),
}
#: (numerator, denominator) of the speed-ups reported: yardstick time / stochformer time
RATIOS = [
    ("torch loop", "stochformer"),
    ("torch loop, float32 draws", "stochformer"),
    ("torch loop, float32 draws", "stochformer, float32 draws"),
    ("NumPy loop", "stochformer"),
    ("torch loop, float32", "stochformer, float32"),
    ("stochformer", "stochformer, float32 draws"),
    ("stochformer", "stochformer, float32"),
    ("torch loop", "stochformer, captured"),
    ("torch loop, float32 draws", "stochformer, captured"),
    ("stochformer", "stochformer, captured"),
]


def law_statistic(X: torch.Tensor) -> list[float]:
    """log(1 − mean pairwise cosine) of the final tokens, per sample: the log-distance to
    synchronisation (its drift is the rate of SPEC §5), sensitive even when cosines are near 1."""
    X = X.to(torch.float64)  # float32 rows, cast, are unit only to float32 rounding: renormalise
    c = mean_cosine(X / X.norm(dim=-1, keepdim=True)).cpu()
    return torch.log((1.0 - c).clamp_min(1e-300)).tolist()


def law_check(a: list[float], b: list[float]) -> dict:
    """Mean ± SE of a statistic for two samples and the z-score of their difference."""
    ma, mb = float(np.mean(a)), float(np.mean(b))
    sa, sb = float(np.std(a, ddof=1) / math.sqrt(len(a))), float(np.std(b, ddof=1) / math.sqrt(len(b)))
    z = (ma - mb) / math.sqrt(sa**2 + sb**2) if sa + sb > 0 else 0.0
    return {"baseline": [ma, sa], "ours": [mb, sb], "z": z, "agree": abs(z) < 4.0}


# --------------------------------------------------------------------------------------------
# whole processes: a fresh python running each implementation, start-up included
# --------------------------------------------------------------------------------------------
def process_commands(size: dict) -> dict[str, list[str]]:
    """Command lines (after ``python``) that run one size from a fresh interpreter."""
    B, N, d, m, L = (size[k] for k in ("batch", "N", "d", "m", "L"))
    T, beta, gamma, sU, sW = (MODEL[k] for k in ("T", "beta", "gamma", "sigma_U", "sigma_W"))
    args = f"{L}, {T}, {m}, {beta}, {gamma}, {sU}, {sW}"
    torch_code = (
        "import math, torch\n" + inspect.getsource(torch_loop)
        + f"gen = torch.Generator().manual_seed(1)\nX = torch.randn({B}, {N}, {d}, generator=gen, dtype=torch.float64)\n"
        f"torch_loop(X / X.norm(dim=-1, keepdim=True), {args}, gen)\n"
    )
    numpy_code = (
        "import math\nimport numpy as np\n" + inspect.getsource(numpy_loop)
        + f"rng = np.random.default_rng(1)\nX = rng.standard_normal(({B}, {N}, {d}))\n"
        f"numpy_loop(X / np.linalg.norm(X, axis=-1, keepdims=True), {args}, rng)\n"
    )
    sf_code = (
        "import stochformer as sf\n"
        f"model = sf.Transformer(sf.SoftmaxAttention(beta={beta}, gamma={gamma}), "
        f"sf.RandomMLP(width={m}, sigma_U={sU}, sigma_W={sW}, rng='parallel'))\n"
        f"sf.solve(model, sf.sphere.uniform({B}, {N}, {d}, seed=1), T={T}, steps={L}, save=sf.SaveAt(every={L}), seed=1)\n"
    )
    sets = [f"{k}={v}" for k, v in {**size, **MODEL, "record_every": L}.items()]
    cli = ["-m", "stochformer", "simulate", "--quiet", "--force", "--out", "bench_out"] + [x for kv in sets for x in ("--set", kv)]
    return {
        "python -c pass": ["-c", "pass"],
        "torch loop (python -c)": ["-c", torch_code],
        "NumPy loop (python -c)": ["-c", numpy_code],
        "stochformer `solve` (python -c)": ["-c", sf_code],
        "`stochformer simulate` (CLI, writes results and figure)": cli,
    }


def process_times(size: dict, repeats: int) -> dict[str, list[float]]:
    """Wall times of each :func:`process_commands` entry, ``repeats`` rounds in alternation."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    times: dict[str, list[float]] = {name: [] for name in process_commands(size)}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats + 1):  # the first round warms the file cache, untimed
            for name, args in process_commands(size).items():
                start = time.perf_counter()
                subprocess.run([sys.executable, *args], env=env, cwd=tmp, check=True, stdout=subprocess.DEVNULL)
                if r:
                    times[name].append(time.perf_counter() - start)
    return times


# --------------------------------------------------------------------------------------------
# machine rates for the roofline
# --------------------------------------------------------------------------------------------
def matmul_size(device: torch.device, quick: bool) -> int:
    return 512 if quick else (8192 if device.type == "cuda" else 2048)


def matmul_rates(device: torch.device, quick: bool, reps: int = 5) -> dict[str, float]:
    """float64 GFLOP/s of one n × n product (n = :func:`matmul_size`: 2048 on a CPU, 8192 on a GPU):
    torch's, and on a CPU numpy's (its own BLAS) as well; the bound takes the faster. Medians of
    ``reps``."""
    n = matmul_size(device, quick)
    A = torch.randn(n, n, dtype=torch.float64, device=device)
    Bm = torch.randn(n, n, dtype=torch.float64, device=device)
    products = {"torch": lambda: A @ Bm}
    if device.type == "cpu":
        An, Bn = A.numpy(), Bm.numpy()
        products["numpy"] = lambda: An @ Bn
    rates = {}
    for name, product in products.items():
        product()
        rates[name] = 2 * n**3 / median_time(product, device, 3 if quick else reps) / 1e9
    return rates


def sampler_rates(device: torch.device, quick: bool, reps: int = 5) -> dict[str, float]:
    """float64 standard normals per second (millions) for each candidate sampler on ``device``,
    medians of ``reps``."""
    n = 1 << (18 if quick else (26 if device.type == "cuda" else 22))
    reps = 3 if quick else reps
    gen = make_generator(0, device)
    buf = torch.empty(n, dtype=torch.float64, device=device)
    rates = {"torch normal_ (one generator)": n / median_time(lambda: buf.normal_(generator=gen), device, reps) / 1e6}
    if device.type != "cpu":
        return rates
    out = np.empty(n)
    for name in ("PCG64", "Philox", "PCG64DXSM", "SFC64"):
        rg = np.random.Generator(getattr(np.random, name)(0))
        rates[f"numpy {name} ziggurat (one thread)"] = n / median_time(lambda: rg.standard_normal(out=out), device, reps) / 1e6
    draws = NormalDraws("parallel")
    label = f"stochformer `rng = parallel` (SFC64 ziggurat, {draws.streams} streams on {min(draws.streams, torch.get_num_threads())} thread(s))"
    into = torch.empty(n, dtype=torch.float64)  # one buffer, as a run's refills (fresh pages would be 1.6× slower)
    rates[label] = n / median_time(lambda: draws._draw(n, gen, torch.float64, device, into), device, reps) / 1e6
    return rates


def bmm_rate(cfg: RunConfig, device: torch.device) -> float:
    """float64 GFLOP/s of the run's largest batched product, Φ Φᵀ: (batch, N, m) @ (batch, m, N)."""
    Phi = torch.randn(cfg.batch, cfg.N, cfg.m, dtype=torch.float64, device=device)
    PhiT = Phi.transpose(-1, -2)
    Phi @ PhiT
    return 2 * cfg.batch * cfg.m * cfg.N**2 / median_time(lambda: Phi @ PhiT, device, 5) / 1e9


def layer_work(cfg: RunConfig, device: torch.device) -> dict[str, float]:
    """Normals and matrix-product flops of one run of ``cfg`` with stochformer's exact sampler.

    Per layer and sample: the MLP (``RandomMLP.cost``) plus attention (``SoftmaxAttention.flops``)."""
    model = make_model(cfg, device=device)
    per = model.noise.cost(cfg.N, cfg.d, device)
    n_layers = cfg.batch * cfg.L
    normals = per["normals"] * n_layers + cfg.batch * cfg.N * cfg.d  # + the initial tokens
    flops = (per["flops"] + model.attention.flops(cfg.N, cfg.d)) * n_layers
    return {"normals": normals, "flops": flops}


def machine() -> str:
    try:
        model = next(
            (line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")),
            "",
        )
    except OSError:
        model = ""
    return f"{platform.machine()} {model or platform.processor()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


# --------------------------------------------------------------------------------------------
def measure_size(size: dict, device: torch.device, repeats: int, quick: bool) -> dict:
    """Every implementation at one size, in alternation, and the rates that set the bound after
    every round (the machine's speed drifts: the fraction of the bound is taken round by round);
    medians, ratios, law checks, work, fractions."""
    names = [n for n in IMPLEMENTATIONS if (device.type == "cpu" or "NumPy" not in n)
             and (device.type == "cuda" or quick or "captured" not in n)]
    times: dict[str, list[float]] = {n: [] for n in names}
    finals: dict[str, list[float]] = {n: [] for n in names}
    rates: list[dict] = []
    warm = run_config(size, device.type, 0).with_updates(L=2)
    for n in names:  # warm-up (allocator, lazy imports, thread pools)
        IMPLEMENTATIONS[n](warm, device)
    for r in range(repeats + 1):  # seed 1000 + r; round 0 is for the law check only
        cfg = run_config(size, str(device), 1000 + r)
        for n in names:
            X, t = timed(lambda: IMPLEMENTATIONS[n](cfg, device), device)
            if r > 0 or quick:
                times[n].append(t)
            finals[n] += law_statistic(X)
            time.sleep(0.05)  # let the previous implementation's spinning threads go idle
        if r > 0 or quick:
            rates.append({"matmul": matmul_rates(device, quick, 3), "samplers": sampler_rates(device, quick, 3)})
    med = {n: statistics.median(v) for n, v in times.items()}
    if "stochformer, captured" in names:  # the captured run's numbers are those of the uncaptured run with rng = torch
        cfg = run_config(size, str(device), 1000)
        capture_identical = bool(torch.equal(run_ours(cfg.with_updates(rng="torch")), run_ours(cfg.with_updates(capture=True))))
    work = layer_work(run_config(size, str(device), 0), device)
    # the exact float64 bound of each round: no run can beat it at the rates measured right after it
    bounds = [work["normals"] / (max(q["samplers"].values()) * 1e6) + work["flops"] / (max(q["matmul"].values()) * 1e9)
              for q in rates]
    fractions = [b / t for b, t in zip(bounds, times["stochformer"])]
    return {
        "size": size,
        "times_s": times,
        "median_s": med,
        "speedups": {f"{a} / {b}": med[a] / med[b] for a, b in RATIOS if a in med and b in med},
        "law_checks": {n: law_check(finals["torch loop"], finals[n]) for n in names if n != "torch loop"},
        "capture_identical": capture_identical if "stochformer, captured" in names else None,
        "work": work,
        "rates": rates,
        "bounds_s": bounds,
        "fractions": fractions,
        "fraction": statistics.median(fractions),
    }


def measure_before(sizes: list[dict], device: torch.device, tree: Path, rounds: int, threads: int | None) -> dict:
    """stochformer of the checkout ``tree`` (before) against this checkout (after) at every size: fresh
    processes in alternation, seeds 1001…, ``checkouts.alternate``; times, ratio before/after, tokens."""
    env = {"OMP_NUM_THREADS": str(threads)} if threads else None
    out = []
    with tempfile.TemporaryDirectory() as work:
        for size in sizes:
            res = alternate({"before": tree, "after": ROOT}, config_fields(size, str(device)),
                            [1001 + r for r in range(rounds)], Path(work), env)
            sec = res["seconds"]
            out.append({"size": size, "times_s": sec, "median_s": {k: statistics.median(v) for k, v in sec.items()},
                        "before_over_after": ratio_summary(sec["before"], sec["after"]),
                        "tokens_equal": res["tokens_equal"], "max_abs_diff": res["max_abs_diff"]})
            print(json.dumps(out[-1], indent=1))
    return {"commit": tree_commit(tree), "after_commit": tree_commit(ROOT), "rounds": rounds, "results": out}


def measure(args: argparse.Namespace, sizes: list[dict], repeats: int, device: torch.device) -> dict:
    """Every timing of the run (in-process alternation, rates, whole processes, ``--before``): the
    measured part of the report."""
    load_before = os.getloadavg()
    results = []
    for size in sizes:
        res = measure_size(size, device, repeats, args.quick)
        results.append(res)
        print(json.dumps({k: res[k] for k in ("size", "median_s", "speedups")}, indent=1))
    # the rates listed: medians over every round of every size
    every = [q for res in results for q in res["rates"]]
    mm_rates = {k: statistics.median(q["matmul"][k] for q in every) for k in every[0]["matmul"]}
    samplers = {k: statistics.median(q["samplers"][k] for q in every) for k in every[0]["samplers"]}
    best = max(samplers, key=samplers.get)
    for res in results:
        w = res["work"]
        res["normals_s"] = w["normals"] / (samplers[best] * 1e6)
        res["flops_s"] = w["flops"] / (max(mm_rates.values()) * 1e9)
        res["bmm_gflops"] = bmm_rate(run_config(res["size"], str(device), 0), device)
    load_mid = os.getloadavg()
    processes = []
    if device.type == "cpu" and args.process_repeats > 0:
        for size in sizes:
            processes.append({"size": size, "times_s": process_times(size, 1 if args.quick else args.process_repeats)})
            print(json.dumps(processes[-1], indent=1))
    before = measure_before(sizes, device, args.before, 1 if args.quick else args.before_rounds, args.threads) if args.before else None
    load_after = os.getloadavg()
    return {
        "load_average": [load_before[0], load_mid[0], load_after[0]],
        "results": results,
        "processes": processes,
        "before": before,
        "matmul_gflops": max(mm_rates.values()),
        "matmul_gflops_by_library": mm_rates,
        "matmul_n": matmul_size(device, args.quick),
        "samplers_M_per_s": samplers,
        "fastest_sampler": best,
    }


def main(argv: list[str] | None = None, default_device: str = "cpu") -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=default_device, help="cpu, cuda or cuda:i")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per implementation and size (median reported)")
    parser.add_argument("--process-repeats", type=int, default=3, help="whole-process repeats per command and size (0: skip)")
    parser.add_argument("--quick", action="store_true", help="small sizes and one repeat: a smoke test of the script")
    parser.add_argument("--large", action="store_true", help=f"add the size {LARGE_SIZE} (for a GPU)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--load", type=int, default=0, metavar="K",
                        help="run every timing beside K processes each keeping one core busy (default 0; K >= 1: a shared machine)")
    parser.add_argument("--before", type=Path, default=None, metavar="TREE",
                        help="also time stochformer of the checkout TREE against this one (fresh processes, in alternation)")
    parser.add_argument("--before-rounds", type=int, default=7, help="rounds of --before (1 with --quick)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write bench_transformer_<device>[_shared].{md,json} here instead of benchmarks/results/ and docs/benchmarks.md")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)

    if args.load < 0:
        parser.error(f"--load must be >= 0 (busy processes), got {args.load}")
    if args.before_rounds < 1:
        parser.error(f"--before-rounds must be >= 1, got {args.before_rounds}")
    if args.before is not None:
        args.before = args.before.resolve()
        if not (args.before / "stochformer" / "__init__.py").is_file():
            parser.error(f"--before {args.before}: not a checkout of stochformer (no stochformer/__init__.py there)")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"--device {args.device}: no CUDA device is available here; nothing to benchmark.")
        return
    device = torch.device(args.device)
    if device.type != "cpu" and args.out is None and not args.no_write:
        parser.error("on a GPU give --out DIR (docs/benchmarks.md holds the CPU numbers)")
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes, repeats = (QUICK_SIZES, 1) if args.quick else (SIZES, args.repeats)
    sizes = sizes + [LARGE_SIZE] * args.large
    started = time.time()
    with busy(args.load):
        measured = measure(args, sizes, repeats, device)
    report = {
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "machine": machine(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset (OpenMP's default)"),
        "cores": os.cpu_count() or 1,
        "load": args.load,
        "command": recorded_command("benchmarks/bench_transformer.py", argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "wall_s": time.time() - started,
        "model": MODEL,
        "repeats": repeats,
        **measured,
    }
    stem = f"bench_transformer_{device.type}" + ("_shared" if args.load else "")
    folder = args.out if args.out is not None else None if args.quick else RESULTS
    if args.no_write or folder is None:
        print(markdown(report))
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    text = markdown(json.loads(path.read_text()))  # the section is generated from the file
    print(text)
    if args.out is not None:
        (folder / f"{stem}.md").write_text(text)
        print(f"written to {path} and {folder / stem}.md")
    else:
        write_section(DOC, section(report), text)
        print(f"written to {path} and {DOC}")


def size_txt(s: dict) -> str:
    return f"batch {s['batch']}, N {s['N']}, d {s['d']}, m {s['m']}, L {s['L']}"


def size_table(rows: list[tuple[dict, dict[str, str]]]) -> list[str]:
    """A markdown table with one row per size and one column per key of the cells."""
    names = list(rows[0][1])
    out = ["| size | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    return out + [f"| {size_txt(size)} | " + " | ".join(cells[n] for n in names) + " |" for size, cells in rows]


def section(rep: dict) -> str:
    """The heading of the report's section of docs/benchmarks.md: the shared machine has its own."""
    return SHARED_SECTION if rep["load"] else SECTION


def load_text(rep: dict) -> str:
    """What the load averages (1 min: before, after the in-process timings, at the end) say."""
    load, k = rep["load_average"], rep["load"]
    text = f"Load average (1 min) {load[0]:.1f} before, {load[1]:.1f} after the in-process timings, {load[2]:.1f} at the end"
    if k:
        return text + (
            f" (the busy processes count in it). {k} busy process{'es' if k > 1 else ''}, each a `python` spinning in a pure-Python loop "
            "on one core (`benchmarks/busy.py`), ran throughout the timings: the shared machine this section "
            "measures, under the OMP_WAIT_POLICY above."
        )
    if load[0] > 0.5 * rep["cores"]:
        return text + (": the machine was shared with other jobs, so absolute times are inflated and noisy; all "
                       "implementations ran in alternation in one process, so the ratios are the meaningful numbers.")
    return text + ": the machine was quiet (this benchmark's own threads count in the load average)."


def before_lines(before: dict) -> list[str]:
    """The ``--before`` table: each checkout's median time, the ratio before/after, the tokens."""
    lines = [
        "",
        f"Before/after: stochformer of the checkout of {before['commit']} (before) against this "
        f"checkout (after, {before['after_commit']}): `run_simulate` at each size in a fresh `python` (torch imported "
        "first, timed inside the process after a two-layer warm-up), the two in alternation with the same seeds "
        f"(1001…), {before['rounds']} round{'s' if before['rounds'] > 1 else ''}; medians in seconds, the ratio before / after (median and range of the "
        "rounds' ratios: above 1, this checkout is faster), and whether the final tokens agree to 1e-12:",
        "",
        "| size | before (s) | after (s) | before / after: median (range) | final tokens |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for b in before["results"]:
        q = b["before_over_after"]
        tokens = "equal to 1e-12" if b["tokens_equal"] else f"DIFFER (max abs difference {b['max_abs_diff']:.1e})"
        lines.append(f"| {size_txt(b['size'])} | {b['median_s']['before']:.3f} | {b['median_s']['after']:.3f} | "
                     f"**{q['median']:.3f}×** ({q['range'][0]:.3f}–{q['range'][1]:.3f}) | {tokens} |")
    return lines


def markdown(rep: dict) -> str:
    lines = [
        section(rep),
        "",
        f"`{rep['command']}` on {rep['device']} — {rep['machine']}; torch {rep['torch']} "
        f"({rep['torch_threads']} intra-op thread(s), OMP_WAIT_POLICY={rep['omp_wait_policy']}), numpy {rep['numpy']}; "
        f"{rep['date']}, {rep['wall_s']:.0f} s in all. " + load_text(rep)
        + " Every implementation ran under the same, unchanged thread settings.",
        "",
        f"Model: post-LN, attention (β = {MODEL['beta']}, γ = {MODEL['gamma']}) then a random ReLU MLP with "
        f"σ_U = σ_W = {MODEL['sigma_U']}, T = {MODEL['T']}, fresh U, W, b_U, b_W per layer and sample. "
        "Yardsticks (the functions `torch_loop` and `numpy_loop` of the script, fifteen lines each): a loop over layers, "
        "batched over samples, with fresh `torch.randn` (numpy: `default_rng().standard_normal`) weights per layer and an "
        "explicit softmax; torch loop, float32 draws: the same `torch_loop` drawing its normals in float32 and casting "
        "them to float64 (`torch.randn(..., dtype=torch.float32).to(torch.float64)`, float64 state). stochformer: `run_simulate(cfg)` (tokens drawn, statistics at the first and last layer; "
        "defaults: exact draws, `rng = auto`). float32 draws: `draw_precision = \"float32\"` (float64 state); "
        "float32: `dtype = \"float32\"` end to end. captured: `capture = true`, the layers between the two records replayed "
        "as CUDA graphs (`solve(capture=True)`; `rng = torch`), timed on CUDA only. "
        f"Times are medians of {rep['repeats']} runs (seeds 1001…), in seconds.",
        "",
    ]
    lines += size_table([(r["size"], {n: f"{t:.3f}" for n, t in r["median_s"].items()}) for r in rep["results"]])
    lines += ["", "Speed-ups (ratio of the medians):", ""]
    lines += size_table([(r["size"], {n: f"**{x:.2f}×**" for n, x in r["speedups"].items()}) for r in rep["results"]])
    lines += [
        "",
        "Same law: log(1 − mean pairwise cosine) of the final tokens (the log-distance to synchronisation), "
        f"mean ± SE over all samples of {rep['repeats']} timed runs and one untimed run, against the torch loop "
        "(float64); |z| < 4 to agree:",
        "",
    ]
    for r in rep["results"]:
        if r.get("capture_identical") is not None:
            lines.append(f"- {size_txt(r['size'])}: the captured run's final tokens "
                         f"{'are identical to' if r['capture_identical'] else 'DIFFER from'} the uncaptured run's with rng = torch "
                         "(seed 1000)")
        for name, c in r["law_checks"].items():
            lines.append(
                f"- {size_txt(r['size'])}, {name}: torch loop {c['baseline'][0]:.3f} ± {c['baseline'][1]:.3f}, "
                f"{name} {c['ours'][0]:.3f} ± {c['ours'][1]:.3f}, z = {c['z']:+.2f} ({'agree' if c['agree'] else 'DISAGREE'})"
            )
    if rep["processes"]:
        lines += [
            "",
            "Whole processes: wall time of a fresh `python` running one run (start-up, imports and, for the CLI, "
            "writing config, dataset, summary and figure), medians of "
            f"{len(rep['processes'][0]['times_s']['python -c pass'])} rounds in alternation, in seconds:",
            "",
        ]
        lines += size_table([(p["size"], {n: f"{statistics.median(t):.2f}" for n, t in p["times_s"].items()})
                             for p in rep["processes"]])
    if rep["before"]:
        lines += before_lines(rep["before"])
    lines += [
        "",
        "Roofline: the fewest exact float64 normals (stochformer's sampler: `RandomMLP.cost` per layer and sample, "
        "plus the initial tokens) at the fastest sampler measured here, plus the matrix-product flops (that cost, "
        "plus attention; 2nkp for a general product, n(n+1)k for a symmetric or triangular one such as ΦΦᵀ, "
        "n³/3 for a Cholesky factorisation) at the faster of torch's and numpy's float64 matmul rates. The rates are "
        "measured after every timed round (the machine's speed drifts), and the fraction of the bound is taken round by "
        "round: the bound at that round's rates over that round's stochformer time. Rates measured here (medians over "
        f"the {len(rep['results'][0]['rates'])} rounds of each size):",
        "",
        "- float64 matmul (one {n}² product): ".format(n=rep["matmul_n"])
        + ", ".join(f"{k} {v:.1f}" for k, v in rep["matmul_gflops_by_library"].items()) + " GFLOP/s",
        *[f"- {k}: {v:.0f} M normals/s" + (" (fastest)" if k == rep["fastest_sampler"] else "") for k, v in rep["samplers_M_per_s"].items()],
        "",
        "| size | normals (M) | GFLOP | normals at the fastest sampler (s) | products at the matmul rate (s) | bound (s), rounds | stochformer (s), rounds | fraction of the bound: median (range) | ΦΦᵀ rate (GFLOP/s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rep["results"]:
        w = r["work"]
        lines.append(
            f"| {size_txt(r['size'])} | {w['normals'] / 1e6:.1f} | {w['flops'] / 1e9:.2f} | {r['normals_s']:.3f} | "
            f"{r['flops_s']:.3f} | {min(r['bounds_s']):.3f}–{max(r['bounds_s']):.3f} | "
            f"{min(r['times_s']['stochformer']):.3f}–{max(r['times_s']['stochformer']):.3f} | "
            f"**{100 * r['fraction']:.0f}%** ({100 * min(r['fractions']):.0f}–{100 * max(r['fractions']):.0f}%) | {r['bmm_gflops']:.1f} |"
        )
    lines += [
        "",
        f"The run's batched products are smaller than the {rep['matmul_n']}² product that sets the rate; the last column "
        "is the rate of its largest, ΦΦᵀ ((batch, N, m) @ (batch, m, N)).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
