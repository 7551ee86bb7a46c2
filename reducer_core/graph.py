"""An immutable index over a model's top-level graph: nodes in topological order, who produces and
who consumes each tensor (outer-scope references of If/Loop/Scan bodies included), and the known
type of every tensor. Candidates are sets of indices into ``GraphIndex.nodes``."""

from __future__ import annotations

import functools
import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import onnx

from reducer_core.errors import InvalidModelError


def subgraphs_of(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """Every graph attribute (If branches, Loop/Scan bodies) of ``node``."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def outer_scope_names(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads from an enclosing scope: used but not defined inside it."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.name for t in graph.sparse_initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(name for name in node.input if name)
        for sub in subgraphs_of(node):
            used |= outer_scope_names(sub)
        defined.update(name for name in node.output if name)
    used.update(o.name for o in graph.output)
    return used - defined


def node_reads(node: onnx.NodeProto) -> tuple[str, ...]:
    """The tensors a node needs: its inputs plus what its subgraphs read from outside."""
    names = [name for name in node.input if name]
    for sub in subgraphs_of(node):
        names.extend(sorted(outer_scope_names(sub)))
    return tuple(dict.fromkeys(names))


def topological_order(nodes: list[onnx.NodeProto], available: set[str]) -> list[int]:
    """Kahn's algorithm, stable with respect to the original order. Raises on cycles."""
    reads = [node_reads(n) for n in nodes]
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            if name:
                producer[name] = index
    waiting = [sum(1 for r in set(rs) if r in producer and r not in available) for rs in reads]
    dependents: dict[int, list[int]] = {}
    for index, rs in enumerate(reads):
        for name in set(rs):
            if name in producer and name not in available:
                dependents.setdefault(producer[name], []).append(index)
    ready = deque(i for i, w in enumerate(waiting) if w == 0)
    order: list[int] = []
    while ready:
        current = ready.popleft()
        order.append(current)
        for dep in sorted(dependents.get(current, [])):
            waiting[dep] -= 1
            if waiting[dep] == 0:
                ready.append(dep)
    if len(order) != len(nodes):
        stuck = [nodes[i].name or nodes[i].op_type for i in range(len(nodes)) if waiting[i] > 0]
        raise InvalidModelError(
            f"The graph has a cycle through {len(stuck)} node(s) (e.g. {stuck[:3]}); "
            "an ONNX graph must be acyclic. Fix the model's producer/consumer links."
        )
    return order


def _type_map(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    types: dict[str, onnx.TypeProto] = {}
    for vi in [*graph.value_info, *graph.input, *graph.output]:
        if vi.type.WhichOneof("value") is not None:
            types[vi.name] = vi.type
    for init in graph.initializer:
        if init.name not in types:
            types[init.name] = onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims))
    return types


@dataclass(frozen=True)
class GraphIndex:
    """Read-only view of a prepared model (Constant nodes lowered, nodes topologically sorted)."""

    model: onnx.ModelProto
    nodes: tuple[onnx.NodeProto, ...]
    reads: tuple[tuple[str, ...], ...]
    writes: tuple[tuple[str, ...], ...]
    producer: dict[str, int]
    consumers: dict[str, tuple[int, ...]]
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]
    initializers: dict[str, onnx.TensorProto]
    types: dict[str, onnx.TypeProto]
    preds: tuple[frozenset[int], ...]
    succs: tuple[frozenset[int], ...]
    fingerprint: str
    _output_set: frozenset[str] = field(repr=False)
    read_weight: Callable[[onnx.TensorProto], np.ndarray] | None = field(default=None, repr=False, compare=False)
    """Reads an initializer's values, external data included (``modelio.weight_reader``); None:
    only inline initializers can be read (``reducer_core.weight_edits`` slices no other)."""

    @classmethod
    def build(
        cls, model: onnx.ModelProto, read_weight: Callable[[onnx.TensorProto], np.ndarray] | None = None
    ) -> GraphIndex:
        """Index ``model``; its nodes must already be in topological order (see ``prepare``)."""
        graph = model.graph
        nodes = tuple(graph.node)
        reads = tuple(node_reads(n) for n in nodes)
        writes = tuple(tuple(o for o in n.output if o) for n in nodes)
        producer: dict[str, int] = {}
        for index, outs in enumerate(writes):
            for name in outs:
                if name in producer:
                    raise InvalidModelError(
                        f"Tensor '{name}' is produced by two nodes ({producer[name]} and {index}); "
                        "ONNX requires single assignment. Rename one of the outputs."
                    )
                producer[name] = index
        consumers: dict[str, list[int]] = {}
        for index, rs in enumerate(reads):
            for name in rs:
                consumers.setdefault(name, []).append(index)
        preds = tuple(frozenset(producer[r] for r in rs if r in producer) for rs in reads)
        succ_lists: list[set[int]] = [set() for _ in nodes]
        for index, ps in enumerate(preds):
            for p in ps:
                succ_lists[p].add(index)
        initializers = {t.name: t for t in graph.initializer}
        return cls(
            model=model,
            nodes=nodes,
            reads=reads,
            writes=writes,
            producer=producer,
            consumers={k: tuple(v) for k, v in consumers.items()},
            graph_inputs=tuple(i.name for i in graph.input if i.name not in initializers),
            graph_outputs=tuple(o.name for o in graph.output),
            initializers=initializers,
            types=_type_map(graph),
            preds=preds,
            succs=tuple(frozenset(s) for s in succ_lists),
            fingerprint=graph_fingerprint(nodes, graph.initializer),
            _output_set=frozenset(o.name for o in graph.output),
            read_weight=read_weight,
        )

    def __len__(self) -> int:
        return len(self.nodes)

    @functools.cached_property
    def input_position(self) -> dict[str, int]:
        """Each original graph input's position among the graph inputs."""
        return {name: i for i, name in enumerate(self.graph_inputs)}

    def is_graph_output(self, name: str) -> bool:
        return name in self._output_set

    @cached_property
    def output_nodes(self) -> frozenset[int]:
        """The nodes that write a graph output."""
        return frozenset(self.producer[name] for name in self.graph_outputs if name in self.producer)

    def all_nodes(self) -> frozenset[int]:
        return frozenset(range(len(self.nodes)))

    def label(self, index: int) -> str:
        node = self.nodes[index]
        return f"{node.op_type}:{node.name}" if node.name else f"{node.op_type}#{index}"

    def ancestors(self, start: Iterable[int], within: frozenset[int]) -> frozenset[int]:
        """``start`` plus everything upstream of it, restricted to ``within``."""
        return self._closure(start, within, self.preds)

    def descendants(self, start: Iterable[int], within: frozenset[int]) -> frozenset[int]:
        """``start`` plus everything downstream of it, restricted to ``within``."""
        return self._closure(start, within, self.succs)

    @staticmethod
    def _closure(start: Iterable[int], within: frozenset[int], edges: tuple[frozenset[int], ...]) -> frozenset[int]:
        seen = {s for s in start if s in within}
        stack = list(seen)
        while stack:
            for nxt in edges[stack.pop()]:
                if nxt in within and nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return frozenset(seen)


def graph_fingerprint(nodes: Iterable[onnx.NodeProto], initializers: Iterable[onnx.TensorProto] = ()) -> str:
    """A stable digest of the graph, so replays and cached verdicts are tied to one model.

    Covers every node in full (op, wiring, attributes, nested bodies) and every initializer's
    name, dtype and shape, plus its bytes when inline or its (offset, length) when external.
    External weight *contents* are not read (that would cost O(weights) per start): a model
    re-exported with the same layout but other weight values keeps its fingerprint."""
    digest = hashlib.sha256()
    for node in nodes:
        digest.update(node.SerializeToString(deterministic=True))
        digest.update(b"\n")
    for tensor in initializers:
        digest.update(_tensor_identity(tensor))
    return digest.hexdigest()[:16]


def _tensor_identity(tensor: onnx.TensorProto) -> bytes:
    header = f"{tensor.name}|{tensor.data_type}|{list(tensor.dims)}|".encode()
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in tensor.external_data}
        return header + f"{info.get('offset', 0)}:{info.get('length', '')}".encode()
    body = onnx.TensorProto()
    body.CopyFrom(tensor)
    body.ClearField("name")
    return header + hashlib.sha256(body.SerializeToString(deterministic=True)).digest()
