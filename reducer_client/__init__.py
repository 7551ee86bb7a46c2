"""A typed Python client of the onnx-reducer service (the calls the ``onnx-reducer submit | status |
download | cancel | retry | jobs`` commands use). It imports nothing of the server side.

    from pathlib import Path
    from reducer_client import ReducerClient

    with ReducerClient("http://127.0.0.1:8000", token="...") as client:
        submitted = client.submit(Path("model.onnx"), "kind: op-present\\nops: [Mul]\\n")
        job = client.wait(submitted.job_id, timeout_s=3600, on_event=print)
        if job.status == "succeeded":
            client.download(job.id, "min-bad", Path("reduced"))
"""

from reducer_client.bundle import model_source
from reducer_client.client import ReducerClient
from reducer_client.errors import (
    ApiError,
    AuthError,
    ModelBundleError,
    NotFoundError,
    Problem,
    ReducerClientError,
    ServerUnreachableError,
    WaitTimeoutError,
)
from reducer_client.models import Event, Iteration, IterationPage, Job, JobError, JobPage, Progress, Submission
from reducer_client.retry import RetryPolicy
from reducer_client.upload import FileSource, TarSource, UploadSource

__all__ = [
    "ApiError",
    "AuthError",
    "Event",
    "FileSource",
    "Iteration",
    "IterationPage",
    "Job",
    "JobError",
    "JobPage",
    "ModelBundleError",
    "NotFoundError",
    "Problem",
    "Progress",
    "ReducerClient",
    "ReducerClientError",
    "RetryPolicy",
    "ServerUnreachableError",
    "Submission",
    "TarSource",
    "UploadSource",
    "WaitTimeoutError",
    "model_source",
]
