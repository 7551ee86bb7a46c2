"""The worker: a Celery app whose one task calls ``run_job``, and a local runner for embedded mode."""
