"""Routers: jobs, events (SSE), artifacts, health."""
