"""The application spark-submit runs for Lakeview's view jobs (cluster deploy mode).

spark-submit starts the driver (a pod on Kubernetes) with this file; it runs `lakeview up`
with the arguments given after the file name, e.g.

    spark-submit --master k8s://https://kubernetes.default.svc --deploy-mode cluster \\
      --conf spark.kubernetes.container.image=lakeview:0.1.0 \\
      local:///opt/lakeview/deploy/spark/lakeview_views.py \\
      -p /etc/lakeview --catalog-uri http://lakeview-catalog:8181/iceberg

Under spark-submit the session takes master and driver address from spark-submit
(``spark_jobs.session.launched_by_spark_submit``), not from lakeview.toml.
"""

import sys

from lakeview.cli.main import main

if __name__ == "__main__":
    main(["up", *sys.argv[1:]])
