"""Services around a run: the Celery jobs, the run's telemetry in Redis, the learning-curve plot."""
