"""Measurements of clouds and runs: per-sample statistics, clusters, Wasserstein distances, the one mean ± SE, bootstrap and power-law fit, and the verdict model that judges a prediction."""
