"""vq_job: Python workers and enqueue for vq_job's external handlers (PostgreSQL extension).

    from vq_job import Worker, AsyncWorker, enqueue

See README.md next to this package for the API, the options and how to deploy a worker.
"""
from .enqueue import enqueue, enqueue_async, enqueue_many, enqueue_many_async
from .job import Job, Retry
from .worker import Worker

__all__ = ["Worker", "AsyncWorker", "Job", "Retry", "enqueue", "enqueue_async", "enqueue_many",
           "enqueue_many_async", "__version__"]
__version__ = "0.2.0"


def __getattr__(name: str):  # AsyncWorker imports asyncio only when asked for
    if name == "AsyncWorker":
        from .aio import AsyncWorker
        return AsyncWorker
    raise AttributeError(name)
