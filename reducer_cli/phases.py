"""What the phase names in the iteration log mean: said once in ``reduce --help`` and
``precision --help`` (the web page has the same legend, translated: api/static/i18n, keys
``phase.NAME``; tests/cli/test_newcomer.py keeps the two lists equal)."""

from __future__ import annotations

PHASES: dict[str, str] = {
    "original": "the full model, checked first (it must fail)",
    "layerwise": "every intermediate tensor compared in one run, to find the first node that goes wrong",
    "localize": "the node the layerwise run suspects, checked alone",
    "bisect-outputs": "halving the graph from the outputs side",
    "bisect-inputs": "halving the graph from the inputs side",
    "linear-outputs": "removing one node at a time from the outputs side",
    "linear-inputs": "removing one node at a time from the inputs side",
    "prune-branches": "removing side branches the failure does not need",
    "descent": "removing chunks of nodes, halving the chunk size each round",
    "ends": "trimming nodes at the ends of the graph",
    "interior": "removing nodes inside the graph",
    "ddmin": "delta debugging: removing subsets of nodes until none can go",
    "1-minimal": "the last pass: each remaining node removed alone (nothing more can go)",
    "ahead": "a check started early on a free slot, before the reduction asked for it (--jobs)",
    "flaky-probe": "a candidate checked again because its verdict contradicts an earlier one",
}


def phase_legend() -> str:
    """One paragraph for --help."""
    entries = "; ".join(f"{name}: {meaning}" for name, meaning in PHASES.items())
    return (
        f"Phases in the iteration log: {entries}. A verdict answered from the cache (the same candidate "
        "seen before) runs no check; several in a row are counted on one line."
    )
