"""The imperative shell shared by the command line and the service worker: load and prepare a
model, write candidates with weights by reference, freeze side branches, and run the reduction
session (``engine.session``). Runtime libraries are imported lazily (``checks.ort_runtime``)."""

from engine.workspace import Log, ReduceOptions, Workspace, load_workspace

__all__ = ["Log", "ReduceOptions", "Workspace", "load_workspace"]
