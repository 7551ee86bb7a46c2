"""The job flow: the one place that records verdicts and ends jobs, between the callers (the
worker's checks, the api's interactive answers) and the engine's reduction session.

- ``jobflow.advance``: one step of a job's session (a verdict in, its records out, state saved);
- ``jobflow.recording``: ``record_taken`` (what a step took in, in order): ``record_iteration``
  (a check's or a person's verdict) and
  ``record_cached`` (a cache's answer): iteration row, counters, ``iteration`` event;
- ``jobflow.ending``: ``succeed`` and ``end`` (and ``cancel``): a job's one terminal event.

Imports engine and persistence, never the api, the worker or the command line (import contract)."""
