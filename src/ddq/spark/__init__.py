"""Spark, for the distributed modes: the driver's JVM and SparkContext, the job that runs a run's workers, and
what each of its tasks runs on an executor. The modes above choose the wiring; this package knows how Spark
starts, where a run's parts listen, and how it ends."""
