"""Smaller inputs: once the graph is minimal, the sizes of the min-bad model's input dimensions
shrink to the smallest that still fail (``Candidate.data``, ``reducer_core.data_edits``).

The dimensions are grouped by size: every dimension of value V > 1 among the model's graph inputs
(initializers excluded) is one group, so inputs that share a sequence length or a batch shrink
together. Largest size first, each group is searched in turn, keeping what the groups before it
settled: halve while the model fails (V/2, V/4, ...); at the first pass, bisect between it and
the last failing size, down to one. With a monotone check the answer is the smallest failing size
exactly, in at most about 2 * log2(V) checks per group (a failure at every size: log2(V) checks,
down to 1). A size the model's nodes cannot take (``DataEditError``: a MatMul's contraction
dimension against its weight, a bias broadcast, a Reshape to a fixed shape) costs no check: it
counts as a pass, and when half the size is refused already the group is left alone (a weight's
dimension, not a data one).

Then the weights (``reducer_core.weight_edits``), with the input sizes settled: the same search
over the sizes of the weights' dimensions (``WeightSearch``: a hidden size shrinks with the weights
and the inputs that share it), and last one check of the model with every weight sliced to the
part its Gather/Slice readers take (``used_candidate``: exact, it costs a check like any step).

A step machine like the strategies (``propose``/``observe``/``best_bad``), deterministic (the
validity of a size is a function of the model), so the session replays it from the verdict cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reducer_core import data_edits, weight_edits
from reducer_core.candidate import Candidate
from reducer_core.extract import extract
from reducer_core.graph import GraphIndex

PHASE = "data"


@dataclass
class _Group:
    size: int  # the original size
    passing: int = 0  # the largest size known not to fail (0: none yet)
    failing: int = 0  # the smallest size known to fail (the original size at first)
    halving: bool = True

    def next_size(self) -> int | None:
        if self.halving:
            return self.failing // 2 if self.failing > 1 else None
        middle = (self.passing + self.failing) // 2
        return middle if middle > self.passing else None


class DataSearch:
    """``valid(candidate)``: whether the candidate's nodes take its sizes (checked without a run)."""

    def __init__(
        self,
        base: Candidate,
        sizes: list[int],
        valid: Callable[[Candidate], bool],
        edit: Callable[[int, int], str] = data_edits.dim_edit,
    ) -> None:
        self.base = base
        self.valid = valid
        self.edit = edit  # the data edit of one size (``data_edits.dim_edit``, ``weight_edits.dim_edit``)
        self._groups = [_Group(size, 0, size) for size in sorted(set(sizes), reverse=True) if size > 1]
        self._settled: dict[int, int] = {}  # original size -> the smallest failing size found
        self._at = 0  # the group being searched
        self._asked: Candidate | None = None
        self._asked_size = 0
        self.checks = 0

    @classmethod
    def start(cls, index: GraphIndex, base: Candidate) -> DataSearch | None:
        """A search over ``base``'s input sizes; None when it has none above 1 (or has data edits
        already, or a primary node: its frozen side-branch constants could not shrink with it)."""
        if base.data or base.primary is not None:  # frozen side branches keep their full sizes
            return None
        try:
            model = extract(index, base)
        except data_edits.DataEditError:
            return None
        sizes = [d for dims in data_edits.input_dims(model).values() for d in dims if isinstance(d, int) and d > 1]
        if not sizes:
            return None
        return cls(base, sizes, lambda candidate: _takes(index, candidate))

    def _candidate(self, sizes: dict[int, int]) -> Candidate:
        edits = frozenset(self.edit(old, new) for old, new in sizes.items() if old != new)
        return Candidate(self.base.nodes, self.base.primary, self.base.body, self.base.data | edits)

    def _with(self, group: _Group, size: int) -> Candidate:
        return self._candidate({**self._settled, group.size: size})

    def propose(self) -> Candidate | None:
        while self._at < len(self._groups):
            group = self._groups[self._at]
            size = group.next_size()
            if size is None:
                self._settled[group.size] = group.failing
                self._at += 1
                continue
            candidate = self._with(group, size)
            if self.valid(candidate):
                self._asked, self._asked_size = candidate, size
                return candidate
            if group.halving and group.failing == group.size:
                self._at += 1  # half the size is refused already: a weight's dimension, left alone
                continue
            self._take(group, size, failed=False)
        self._asked = None
        return None

    def observe(self, candidate: Candidate, failed: bool) -> None:
        if candidate != self._asked or self._asked is None:
            raise ValueError("observe() was given a candidate that is not the pending proposal")
        group = self._groups[self._at]
        self._take(group, self._asked_size, failed)
        self._asked = None

    @staticmethod
    def _take(group: _Group, size: int, failed: bool) -> None:
        if failed:
            group.failing = size
        else:
            group.passing, group.halving = size, False

    @property
    def done(self) -> bool:
        return self._at >= len(self._groups)

    @property
    def best_bad(self) -> Candidate:
        sizes = dict(self._settled)
        if self._at < len(self._groups):
            group = self._groups[self._at]
            sizes[group.size] = group.failing
        return self._candidate(sizes)


class WeightSearch(DataSearch):
    """The search over the sizes of the weights' dimensions (``weight_edits.dim_edit``), on top of
    the input sizes ``base`` settled."""

    @classmethod
    def start(cls, index: GraphIndex, base: Candidate) -> DataSearch | None:
        """None when ``base``'s model has no weight dimension above 1 (or a primary node)."""
        if base.primary is not None or any(weight_edits.is_weight_edit(e) for e in base.data):
            return None
        try:
            model = extract(index, base)
        except data_edits.DataEditError:
            return None
        sizes = weight_edits.weight_sizes(model, index.read_weight)
        if not sizes:
            return None
        return cls(base, sizes, lambda candidate: _takes(index, candidate), weight_edits.dim_edit)


def used_candidate(index: GraphIndex, base: Candidate) -> Candidate | None:
    """``base`` with every weight its readers take only part of sliced to that part
    (``weight_edits.used_edit``); None when there is none (or its nodes cannot take it)."""
    if base.primary is not None:
        return None
    try:
        names = weight_edits.used_candidates(extract(index, base), index.read_weight)
    except data_edits.DataEditError:
        return None
    if not names:
        return None
    candidate = Candidate(
        base.nodes, base.primary, base.body, base.data | {weight_edits.used_edit(name) for name in names}
    )
    return candidate if _takes(index, candidate) else None


def _takes(index: GraphIndex, candidate: Candidate) -> bool:
    try:
        extract(index, candidate)
    except data_edits.DataEditError:
        return False
    return True


def input_sizes(index: GraphIndex, candidate: Candidate) -> dict[str, object] | None:
    """What the data edits of ``candidate`` changed (``--summary-json``'s ``smaller_inputs``): the
    sizes, the input elements and the weights' bytes before and after; None without data edits."""
    if not candidate.data:
        return None
    plain = extract(index, Candidate(candidate.nodes, candidate.primary, candidate.body))
    edited = extract(index, candidate)
    before, after = data_edits.input_dims(plain), data_edits.input_dims(edited)
    return {
        "sizes": data_edits.describe(candidate.data),
        "weights": weight_edits.describe(sorted(candidate.data)),
        "inputs_before": before,
        "inputs_after": after,
        "elements_before": data_edits.elements(before),
        "elements_after": data_edits.elements(after),
        "initializer_bytes_before": weight_edits.initializer_bytes(plain),
        "initializer_bytes_after": weight_edits.initializer_bytes(edited),
    }
