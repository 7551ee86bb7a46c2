"""The HTTP api: ``create_app(settings, enqueue)``. It enqueues by task name and never imports the worker."""
