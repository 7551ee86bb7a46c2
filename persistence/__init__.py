"""Shared by the api and the worker: database models, repositories (every query), the artifact
store, enums and the contracts that cross the queue (task names, event payloads)."""
