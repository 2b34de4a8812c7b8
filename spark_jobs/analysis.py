"""What Spark's analysis (no job runs) tells a plan about its input: the types of its SUM and
AVG arguments, so the weighted sums are computed in a type that cannot wrap
(:meth:`lakeview.sql.plan.KeyedAggregatePlan.with_sum_types`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeview.sql.plan import KeyedAggregatePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def with_sum_types(spark: SparkSession, plan: KeyedAggregatePlan, relation: str) -> KeyedAggregatePlan:
    """``plan`` with the Spark types of its SUM/AVG arguments over ``relation`` (a temp view
    shaped like the plan's input). Unchanged when it has none or Spark cannot analyse them."""
    sql = plan.sum_arguments_sql(relation)
    if sql is None:
        return plan
    from pyspark.errors import AnalysisException  # lazy: Spark loads only where views run

    try:
        schema = spark.sql(sql).schema
    except AnalysisException:  # e.g. an argument over an event-time window's columns: untyped, as before
        return plan
    return plan.with_sum_types({f.name: f.dataType.simpleString() for f in schema.fields})
