"""Property, through the catalog: random graph view queries from the grammar (joins of 1-4 inputs of every
kind, subqueries, CTEs, aggregates over NULLs, DISTINCT, UNION, top-k with ties, ORDER BY … LIMIT) kept by
real Spark and the real catalog over random insert / update / delete sequences landed as change-feed files;
after every epoch the view read back (DuckDB over the Iceberg REST catalog, or the Delta log) equals DuckDB's
recompute of the same SQL over the inputs' current rows. A fixed-seed slice (Iceberg, and Delta for some
seeds); ``bench/graph_fuzz.py --catalog`` runs any number of seeds."""

from __future__ import annotations

import pytest

from tests.spark_jobs.graph_fuzz_catalog import graph_seeds, run_seed_through_catalog

EPOCHS = 5
SEEDS = graph_seeds(20261127, 6, EPOCHS)  # the first 6 seeds from here whose graph view has rows most epochs
CASES = [(seed, "iceberg") for seed in SEEDS[:4]] + [(seed, "delta") for seed in SEEDS[4:]]


@pytest.mark.parametrize(("seed", "fmt"), CASES, ids=[f"{fmt}-{seed}" for seed, fmt in CASES])
def test_a_random_graph_view_read_through_the_catalog_equals_the_recompute_after_every_epoch(
    spark, catalog_server, lake_dir, tmp_path, seed: int, fmt: str
) -> None:
    failure = run_seed_through_catalog(
        spark, catalog_server.uri, catalog_server.port, lake_dir, tmp_path, seed, fmt, EPOCHS, prefix="prop"
    )
    assert failure is None, f"seed {failure.seed} ({fmt}), epoch {failure.epoch}\n{failure.query}\n{failure.diff}"
