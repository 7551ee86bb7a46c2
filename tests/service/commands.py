"""The exact commands the deployment files run; the tests start the same ones (only the api's bind
address differs: a free port on 127.0.0.1 here, 0.0.0.0:8000 in a container)."""

MIGRATE_COMMAND = ["onnx-reducer", "db", "upgrade"]
API_COMMAND = ["onnx-reducer", "serve", "--no-local-worker", "--host", "0.0.0.0", "--port", "8000"]
WORKER_COMMAND = [
    *("celery", "-A", "worker.celery_app", "worker", "-Q", "cpu"),
    *("--pool", "solo", "--concurrency", "1", "--loglevel", "INFO"),
]
GPU_WORKER_COMMAND = [*WORKER_COMMAND[:5], "gpu", *WORKER_COMMAND[6:]]
EMBEDDED_COMMAND = ["onnx-reducer", "serve"]


def api_command(port: int) -> list[str]:
    return [*API_COMMAND[:-4], "--host", "127.0.0.1", "--port", str(port)]
