"""Phase diagrams (``phase``) and the paper's experiments of SPEC §6 items 1–3 at tiny sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from stochformer.cli import main
from stochformer.config import ConfigError, build_config
from stochformer.experiments import paper
from stochformer.experiments.phase import PhaseConfig, run_phase
from stochformer.plotting.sync import phase_title, plot_cluster_course, plot_clusters, plot_phase, plot_scenarios, plot_table


def _phase(*overrides: str) -> PhaseConfig:
    return build_config({}, list(overrides), model=PhaseConfig)


def test_phase_config_validates_fields_and_grid_points():
    with pytest.raises(ConfigError, match="x_field"):
        _phase("x_field=colour")
    with pytest.raises(ConfigError, match="y_field"):
        _phase("x_field=d", "y_field=d")
    cfg = _phase("x_field=d", "x_values=[4, 8]", "y_field=sigma", "y_values=[0.5]")
    p = cfg.point(8, 0.5)
    assert (p.d, p.sigma_U, p.sigma_W) == (8, 0.5, 0.5)
    with pytest.raises(ConfigError, match="d"):
        _phase("x_field=d", "x_values=[1, 4]").point(1, 0.0)


@settings(max_examples=60, deadline=None)
@given(axes=st.sampled_from([("gamma", "sigma"), ("L", "gamma"), ("sigma", "T"), ("d", "L")]),
       xs=st.lists(st.integers(0, 12), min_size=1, max_size=3), ys=st.lists(st.integers(0, 12), min_size=1, max_size=3),
       L=st.integers(1, 25).map(lambda k: 4 * k), measure=st.sampled_from(["lyapunov", "sync_fraction"]))
def test_a_phase_grid_is_refused_exactly_where_one_point_takes_a_step_that_is_not_small(axes, xs, ys, L, measure):
    """λ₁ − γ, the predicted boundary, is a Δt → 0 limit: a grid is refused iff at some point the
    coarsest step (T/(L/4) for the extrapolated exponent, else T/L) times max(the noise's
    ``fastest_rate``, |γ|) exceeds ``SMALL_STEP``; the error names the point of the largest product
    and the field to raise."""
    from stochformer.experiments.sync import SMALL_STEP
    from stochformer.model.kernel import NoiseKernel, fastest_rate

    scale = {"gamma": 0.5, "sigma": 0.25, "L": 8, "T": 0.5, "d": 1}  # grid values from the integers drawn
    shift = {"gamma": -3.0, "sigma": 0.0, "L": 8, "T": 0.5, "d": 3}
    values = [[shift[a] + scale[a] * v for v in vs] for a, vs in zip(axes, (xs, ys))]
    fields = {"model": {"L": L, "T": 2.0, "gamma": 0.5, "batch": 2}, "measure": measure, "x_field": axes[0], "y_field": axes[1],
              "x_values": values[0], "y_values": values[1]}
    per = 4 if measure == "lyapunov" else 1
    products = {}
    for x in values[0]:
        for y in values[1]:
            at = {"L": L, "T": 2.0, "gamma": 0.5, "sigma": 0.0, "d": 3, axes[0]: x, axes[1]: y}
            kern = NoiseKernel("relu", int(at["d"]), at["sigma"], at["sigma"])
            rate = max(fastest_rate(kern.kappa1, kern.kappa1_prime, int(at["d"])), abs(at["gamma"]))
            products.setdefault((x, y), rate * at["T"] / (int(at["L"]) // per))
    (x, y), product = max(products.items(), key=lambda item: item[1])  # the first of the largest
    try:
        PhaseConfig(**fields)
    except ValueError as err:
        text = str(err)
        assert product > SMALL_STEP, text
        steps = ("x_values" if axes[0] == "L" else "y_values") if "L" in axes else "model.L"
        assert f"{steps}: at {axes[0]} = {x:g}, {axes[1]} = {y:g}, the coarsest step" in text, text
        assert f"= {product:.3g} > {SMALL_STEP:g}" in text, text
    else:
        assert product <= SMALL_STEP, (x, y, product)


def test_phase_lyapunov_grid_resumes_and_agrees_with_the_boundary_far_from_it(tmp_path, monkeypatch):
    # ReLU d = 8, σ = 0.5: λ₁ = −1.375. Grid γ ∈ {−3, 0} × σ ∈ {0.5}: predicted λ₁ − γ = +1.625, −1.375,
    # far from 0 compared with the SE (~0.15 with 48 pairs, T = 3), so the signs must agree.
    cfg = _phase("model.d=8", "model.dynamics=sde", "x_field=gamma", "x_values=[-3, 0]", "y_field=sigma",
                 "y_values=[0.5]", "pairs=48", "model.L=60", "model.T=3", "boundary_points=9")
    store = tmp_path / "store"
    res = run_phase(cfg, store=store)
    assert res.value.shape == (1, 2) and res.fine_lambda_1.shape == (1, 9)
    np.testing.assert_allclose(res.pred_lambda_1[0], [-1.375 + 3, -1.375])
    assert res.agreement()["same_sign"] == 2
    assert np.all(np.abs(res.value - res.pred_lambda_1) < 4 * res.se)
    # a second run reads every point from the store instead of recomputing it
    import stochformer.experiments.phase as phase_mod

    monkeypatch.setattr(phase_mod, "measure_lyapunov", lambda *a, **k: pytest.fail("recomputed a stored point"))
    again = run_phase(cfg, store=store)
    np.testing.assert_array_equal(again.value, res.value)
    assert plot_phase(res).axes[0].get_title() == "sde, relu, $d = 8$, $L = 60$, $T = 3$: predicted boundary in black"


def test_phase_title_names_the_fixed_parameters_not_the_axes():
    cfg = _phase("model.gamma=-0.5", "x_field=d", "x_values=[3, 8]", "y_field=sigma", "y_values=[0.0]", "model.L=40",
                 "model.T=2")
    assert cfg.model.dynamics == "transformer"  # its width m is fixed too
    assert phase_title(cfg) == "transformer, relu, $\\gamma = -0.5$, $L = 40$, $T = 2$, $m = 256$: predicted boundary in black"
    sde = cfg.model_copy(update={"model": cfg.model.model_copy(update={"dynamics": "sde"})})
    assert phase_title(sde) == "sde, relu, $\\gamma = -0.5$, $L = 40$, $T = 2$: predicted boundary in black"


def test_phase_cli_sync_fraction(tmp_path):
    out = tmp_path / "ph"
    args = ["phase", "--quiet", "--out", str(out)]
    for o in ("model.d=4", "model.N=4", "model.batch=4", "model.L=20", "model.T=1", "model.dynamics=sde",
              "measure=sync_fraction", "x_field=gamma",
              "x_values=[0, 1]", "y_field=noise_scale", "y_values=[0, 1]", "boundary_points=5"):
        args += ["--set", o]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    data = json.loads((out / "phase.json").read_text())
    assert np.array(data["value"]).shape == (2, 2)
    assert ((0 <= np.array(data["value"])) & (np.array(data["value"]) <= 1)).all()
    assert (out / "phase.png").exists() and not (tmp_path / "ph.tasks").exists()


def test_paper_clusters_tanh_ends_in_antipodal_clusters_relu_does_not():
    # SPEC §6 item 1 (reduced): tanh with no biases is an odd field, so pairs synchronise up to sign:
    # pair cosines pile up near −1 as well as +1; ReLU's do not reach −1.
    res = paper.run_clusters(paper.ClustersConfig(seed=1, tol=0.05, sizes=dict(N=16, L=100, T=20.0, m=32, batch=3)))
    tanh, relu = res.clusters["tanh"], res.clusters["relu"]
    # odd field: x ↦ −x is a symmetry, so near −1 and near +1 are equally likely for uniform starts
    assert tanh.frac_near_minus.mean() > 0.1 and np.all(tanh.n_antipodal >= 1)
    assert np.all(relu.frac_near_minus < 0.05)
    assert json.loads(json.dumps(res.to_dict()))["size"] == "quick"
    plot_clusters(res)
    # the time course: counts at every snapshot of [0, T] and of a run to the predicted horizon
    for act, course in res.courses.items():
        counts, long = np.asarray(course["counts"]), np.asarray(course["long_counts"])
        assert counts.shape == (3, len(course["times"])) and course["times"][-1] == pytest.approx(20.0)
        assert course["long_times"][-1] >= course["horizon"] > 20.0 and long.shape[0] == 3
        assert np.all(counts[:, 0] > counts[:, -1]) and course["up_to_sign"] == (act == "tanh")
    plot_cluster_course(res)


PAPER_CONFIGS = {"clusters": paper.ClustersConfig, "scenarios": paper.ScenariosConfig, "table": paper.TableConfig}


@settings(max_examples=30, deadline=None, database=None, derandomize=True)
@given(item=st.sampled_from(sorted(PAPER_CONFIGS)), key=st.text("abcdefghijklmnopqrstuvwxyzNLT_", min_size=1, max_size=8))
def test_paper_configs_name_an_unknown_size_entry(item, key):
    """A ``sizes`` entry outside the item's table is one error naming ``sizes``, the entry and the
    valid keys; every entry of the table is accepted."""
    cls = PAPER_CONFIGS[item]
    valid = cls.SIZES["quick"]
    if key in valid:
        assert cls(sizes={key: valid[key]}).resolved_sizes()[key] == valid[key]
        return
    with pytest.raises(ConfigError, match=rf"sizes: .*unknown entries {key}; valid: {', '.join(valid)}"):
        build_config({"sizes": {key: 1}}, model=cls)


def test_paper_runs_refuse_bad_input_before_any_work(monkeypatch):
    """Each bad field of a paper item's config is named before a single run starts; the report
    reaches the same configs by the same ``--set`` paths."""
    from stochformer.report.runner import plan

    ran = []
    monkeypatch.setattr(paper, "run_simulate", lambda *a, **k: ran.append(1))
    monkeypatch.setattr(paper, "run_tasks", lambda *a, **k: ran.append(1))
    for run, bad, field in ((paper.run_clusters, {"tol": 1.5}, "tol"), (paper.run_clusters, {"device": "tpu"}, "device"),
                            (paper.run_scenarios, {"size": "huge"}, "size"), (paper.run_scenarios, {"seed": -1}, "seed"),
                            (paper.run_table, {"activations": ["nope"]}, "activations"),
                            (paper.run_table, {"sizes": {"width": 8}}, "sizes")):
        with pytest.raises(ValueError, match=field):
            run(bad)
    assert not ran
    p = {x.section.name: x.config for x in plan("tiny", overrides=["clusters.sizes.N=12", "table.activations=['tanh']"])}
    assert isinstance(p["clusters"], paper.ClustersConfig) and p["clusters"].resolved_sizes()["N"] == 12
    assert isinstance(p["table"], paper.TableConfig) and p["table"].grid() == [("tanh", 5, 0.0)]
    assert isinstance(p["scenarios"], paper.ScenariosConfig)


def test_paper_scenarios_and_table_tiny(tmp_path):
    sc = paper.run_scenarios(paper.ScenariosConfig(sizes=dict(N=4, L=4, m=8, batch=1, ds=[5], sigmas=[0.0])), store=tmp_path / "s")
    assert len(sc.runs) == len(paper.SCENARIO_ACTIVATIONS) * len(paper.SCENARIO_GAMMAS)
    assert all(len(r["energy"]) == 5 for r in sc.runs.values())
    plot_scenarios(sc, "energy")
    tab = paper.run_table(paper.TableConfig(activations=["relu"],
                                            sizes=dict(draws=4000, pairs=16, energy_pairs=32, L=20, m=16, ds=[5], sigmas=[0.1])))
    (row,) = tab.rows
    # κ(1) = E|G(x)|²/d is unbiased for every width m: 4 SE
    assert abs(row["kappa"] - row["kappa_pred"]) < 4 * row["kappa_se"]
    assert "| relu | 5 | 0.1 |" in tab.markdown()
    tab.save(tmp_path / "t")
    plot_table(tab)
    with pytest.raises(ValueError, match="size"):
        paper.run_table({"size": "huge"})
