#!/bin/sh
# Entry point of the Lakeview image.
#   lakeview ARGS...        e.g. `serve -p /etc/lakeview`, `up -p /etc/lakeview`, `status`
#   driver | executor ...   what spark-submit --deploy-mode cluster on Kubernetes passes to the
#                           driver and executor pods (the contract of Spark's own entrypoint.sh)
#   spark-class | spark-submit ...  run pyspark's Spark tools (standalone master/worker in compose)
set -eu

case "${1:-}" in
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    exec java ${SPARK_EXECUTOR_JAVA_OPTS:-} -Xms"${SPARK_EXECUTOR_MEMORY:-1g}" -Xmx"${SPARK_EXECUTOR_MEMORY:-1g}" \
      -cp "$SPARK_HOME/jars/*:${SPARK_EXTRA_CLASSPATH:-}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "${SPARK_EXECUTOR_POD_NAME:-}"
    ;;
  spark-class|spark-submit)
    tool="$1"
    shift
    exec "$SPARK_HOME/bin/$tool" "$@"
    ;;
  *)
    exec lakeview "$@"
    ;;
esac
