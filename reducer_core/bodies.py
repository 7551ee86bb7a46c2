"""Edits inside the bodies of ``Loop`` and ``If`` nodes: hierarchical ids, the flattened search
space over body nodes, and the rewriting that keeps every edited body a valid body.

A body node has a hierarchical id: ``"5/body/12"`` is node 12 of the ``body`` of top-level node
5, ``"5/body/12/then_branch/3"`` node 3 of the then branch of that node (an ``If`` in the Loop's
body). A candidate's ``body`` field lists the ids removed (``Candidate.body``). Removing a body node
keeps the body's signature:

- a Loop's condition and loop-carried outputs whose producer is gone pass their input through
  (``cond_out`` becomes ``cond_in``, ``carried_out[k]`` becomes ``carried_in[k]``: the types match
  by the Loop's contract, no shape needed);
- any other tensor still needed (a scan output, an If branch output, a value read by a kept body
  node or by a nested body) is *hoisted*: it becomes an input of the top-level graph, typed from
  the body's shape inference, and the body reads it from the enclosing scope (a body output gets
  an ``Identity`` from it, since the checker wants body outputs produced inside the body).

So only a body node whose outputs are typed with a shape, or pass-through, may go
(``Flattened.fixed`` lists the others). ``"5/inline"`` replaces top-level node 5 by the nodes left
in its body when they read nothing of the body's own inputs (the iteration number, condition or
carried values): the culprit does not depend on iteration state and is a plain subgraph.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx
from onnx import helper

from reducer_core.candidate import Candidate
from reducer_core.control_flow import has_shape, infer_body_graph, loop_call_types, type_map
from reducer_core.graph import GraphIndex, node_reads, subgraphs_of

BODIES = {"Loop": ("body",), "If": ("then_branch", "else_branch")}
INLINE = "inline"
_DEFAULT_DOMAINS = ("", "ai.onnx")
TypeMap = dict[str, onnx.TypeProto]


def body_attrs(node: onnx.NodeProto) -> tuple[str, ...]:
    """The body attributes this module edits (Loop's body, If's branches); () for other nodes."""
    if node.domain not in _DEFAULT_DOMAINS:
        return ()
    return BODIES.get(node.op_type, ())


def _graph_attr(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    for attr in node.attribute:
        if attr.name == name and attr.type == onnx.AttributeProto.GRAPH:
            graph: onnx.GraphProto = attr.g
            return graph
    raise KeyError(name)


def inline_id(node: int) -> str:
    return f"{node}/{INLINE}"


@dataclass(frozen=True)
class Scope:
    """One body: its path (``"5/body"``), graph, owner op and the types known inside it (its
    own tensors, and what it reads from enclosing scopes)."""

    path: str
    graph: onnx.GraphProto
    owner: str
    types: TypeMap


@dataclass(frozen=True)
class Element:
    """A body node in the flattened space: its id, node, scope, and the id of the nested
    control-flow node it sits in (None in a body of a top-level node)."""

    path: str
    node: onnx.NodeProto
    scope: str
    parent: str | None


@dataclass
class BodyPlan:
    """What rewriting needs for one indexed model, computed once per top-level node on demand."""

    index: GraphIndex
    names: dict[str, int] = field(default_factory=dict)
    scopes: dict[str, Scope] = field(default_factory=dict)
    _done: set[int] = field(default_factory=set)

    @classmethod
    def build(cls, index: GraphIndex) -> BodyPlan:
        plan = cls(index)
        _count_names(index.model.graph, plan.names)
        return plan

    def scopes_of(self, node: int) -> list[Scope]:
        """Every body of top-level ``node``, nested ones included (outer before inner)."""
        if node not in self._done:
            self._done.add(node)
            self._add_scopes(str(node), self.index.nodes[node], dict(self.index.types))
        prefix = f"{node}/"
        return [scope for path, scope in self.scopes.items() if path.startswith(prefix)]

    def _add_scopes(self, path: str, node: onnx.NodeProto, outer: TypeMap) -> None:
        for attr in body_attrs(node):
            graph = _graph_attr(node, attr)
            call = loop_call_types(node, outer) if node.op_type == "Loop" else []
            inferred = infer_body_graph(self.index.model, graph, call, outer)
            types = dict(outer)
            types.update(type_map(inferred if inferred is not None else graph))
            scope_path = f"{path}/{attr}"
            self.scopes[scope_path] = Scope(scope_path, graph, node.op_type, types)
            for i, inner in enumerate(graph.node):
                if body_attrs(inner):
                    self._add_scopes(f"{scope_path}/{i}", inner, types)

    def hoist_name(self, name: str, taken: Iterable[str]) -> str:
        """A top-level input name for body tensor ``name``: itself when no other scope defines
        it, else a fresh one."""
        used = set(taken)
        if self.names.get(name, 0) <= 1 and name not in used:
            return name
        k = 0
        while (candidate := f"{name}__outer{k}") in self.names or candidate in used:
            k += 1
        return candidate


def _count_names(graph: onnx.GraphProto, names: dict[str, int]) -> None:
    """How many times each tensor name is defined, over every scope of the model."""
    defined = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    for node in graph.node:
        defined.extend(o for o in node.output if o)
        for sub in subgraphs_of(node):
            _count_names(sub, names)
    for name in defined:
        names[name] = names.get(name, 0) + 1


_PLANS: dict[int, tuple[GraphIndex, BodyPlan]] = {}


def plan_for(index: GraphIndex) -> BodyPlan:
    """The index's plan, built once (keyed by identity: an index is immutable)."""
    held = _PLANS.get(id(index))
    if held is not None and held[0] is index:
        return held[1]
    plan = BodyPlan.build(index)
    if len(_PLANS) > 8:
        _PLANS.clear()
    _PLANS[id(index)] = (index, plan)
    return plan


def _passthrough(scope: Scope) -> dict[str, str]:
    """A Loop body's outputs that may pass their input through: condition and carried values."""
    if scope.owner != "Loop":
        return {}
    graph = scope.graph
    carried = len(graph.input) - 2
    pairs = {graph.output[0].name: graph.input[1].name} if graph.output and len(graph.input) > 1 else {}
    for k in range(max(carried, 0)):
        if 1 + k < len(graph.output):
            pairs[graph.output[1 + k].name] = graph.input[2 + k].name
    return pairs


def removable(scope: Scope, node: onnx.NodeProto) -> bool:
    """Whether ``node`` may go from ``scope``: each output passes through or has a typed shape."""
    through = _passthrough(scope)
    return all(name in through or has_shape(scope.types.get(name)) for name in node.output if name)


# -- the flattened space ---------------------------------------------------------------------


@dataclass(frozen=True)
class Flattened:
    """Every body node of the given top-level nodes, in one list (a body's nodes in order, a
    nested body's nodes right after their control-flow node), indexed as a graph (``index``:
    body tensors qualified by scope, a nested node depends on its control-flow node) so that the
    strategies of the outer graph run over it unchanged. ``fixed``: the positions that may not
    be removed."""

    index: GraphIndex
    elements: tuple[Element, ...]
    fixed: frozenset[int]

    @classmethod
    def build(cls, plan: BodyPlan, nodes: Iterable[int]) -> Flattened:
        elements: list[Element] = []
        flat: list[onnx.NodeProto] = []
        outputs: list[str] = []
        fixed: set[int] = set()
        for top in sorted(nodes):
            if not body_attrs(plan.index.nodes[top]):
                continue
            plan.scopes_of(top)
            _flatten(plan, str(top), plan.index.nodes[top], None, {}, elements, flat, outputs, fixed)
        graph = helper.make_graph(flat, "bodies", [], [onnx.ValueInfoProto(name=name) for name in outputs])
        model = helper.make_model(graph, opset_imports=list(plan.index.model.opset_import))
        return cls(GraphIndex.build(model), tuple(elements), frozenset(fixed))

    def removed(self, kept: frozenset[int]) -> frozenset[str]:
        """The ids removed when the positions ``kept`` stay (with the fixed ones, and the
        control-flow nodes that hold a kept one); a node inside a removed one is not listed."""
        position = {element.path: i for i, element in enumerate(self.elements)}
        keep = set(kept | self.fixed)
        for i in list(keep):
            parent = self.elements[i].parent
            while parent is not None:
                keep.add(position[parent])
                parent = self.elements[position[parent]].parent
        gone = {e.path for i, e in enumerate(self.elements) if i not in keep}
        return frozenset(path for path in gone if self.elements[position[path]].parent not in gone)


def _flatten(
    plan: BodyPlan,
    path: str,
    node: onnx.NodeProto,
    parent: str | None,
    outer_names: dict[str, str],
    elements: list[Element],
    flat: list[onnx.NodeProto],
    outputs: list[str],
    fixed: set[int],
) -> None:
    for attr in body_attrs(node):
        scope = plan.scopes[f"{path}/{attr}"]
        graph = scope.graph
        local = dict(outer_names)  # tensor name -> qualified name in the flat graph
        for info in graph.input:
            local[info.name] = f"{scope.path}::{info.name}"
        for i, inner in enumerate(graph.node):
            element_path = f"{scope.path}/{i}"
            reads = [local.get(name, name) for name in node_reads(inner)]
            if parent is not None:
                reads.append(f"{parent}::scope")
            for name in inner.output:
                if name:
                    local[name] = f"{scope.path}::{name}"
            writes = [local[name] for name in inner.output if name]
            if body_attrs(inner):
                writes.append(f"{element_path}::scope")
            flat.append(helper.make_node(inner.op_type, reads, writes, name=element_path))
            if not removable(scope, inner):
                fixed.add(len(elements))
            elements.append(Element(element_path, inner, scope.path, parent))
            if body_attrs(inner):
                _flatten(plan, element_path, inner, element_path, local, elements, flat, outputs, fixed)
        outputs.extend(local.get(o.name, o.name) for o in graph.output if local.get(o.name, o.name) not in outputs)


# -- rewriting ---------------------------------------------------------------------------------


@dataclass
class Edited:
    """The rewritten top-level nodes of a candidate (in order), the top-level inputs the edits
    added (hoisted tensors) and the types of body tensors (for inlined outputs)."""

    nodes: list[onnx.NodeProto]
    hoisted: dict[str, onnx.TypeProto]
    inlined: bool = False
    types: TypeMap = field(default_factory=dict)


def edit(index: GraphIndex, nodes: Iterable[int], removed: frozenset[str]) -> Edited:
    """The top-level nodes ``nodes`` (in order) with the body edits ``removed`` applied."""
    plan = plan_for(index)
    hoisted: dict[str, onnx.TypeProto] = {}
    result: list[onnx.NodeProto] = []
    order = sorted(nodes)
    inline = [n for n in order if inline_id(n) in removed]
    for n in order:
        node = index.nodes[n]
        prefix = f"{n}/"
        if not any(path.startswith(prefix) for path in removed):
            result.append(node)
            continue
        plan.scopes_of(n)
        result.append(_edit_node(plan, str(n), node, removed, {}, hoisted))
    if len(inline) == 1 and order == inline:
        return _inline(plan, inline[0], result[0], hoisted)
    return Edited(result, hoisted)


def _edit_node(
    plan: BodyPlan,
    path: str,
    node: onnx.NodeProto,
    removed: frozenset[str],
    rename: dict[str, str],
    hoisted: dict[str, onnx.TypeProto],
) -> onnx.NodeProto:
    new = onnx.NodeProto()
    new.CopyFrom(node)
    new.input[:] = [rename.get(name, name) for name in node.input]
    attrs = body_attrs(node)
    for attr in new.attribute:
        if attr.type == onnx.AttributeProto.GRAPH and attr.name in attrs:
            attr.g.CopyFrom(_edit_graph(plan, f"{path}/{attr.name}", removed, rename, hoisted))
        elif attr.type == onnx.AttributeProto.GRAPH:
            _rename_reads(attr.g, rename)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for graph in attr.graphs:
                _rename_reads(graph, rename)
    return new


def _edit_graph(
    plan: BodyPlan,
    scope_path: str,
    removed: frozenset[str],
    outer_rename: dict[str, str],
    hoisted: dict[str, onnx.TypeProto],
) -> onnx.GraphProto:
    scope = plan.scopes[scope_path]
    graph = scope.graph
    gone = [i for i in range(len(graph.node)) if f"{scope_path}/{i}" in removed]
    lost = {name for i in gone for name in graph.node[i].output if name}
    kept = [(i, node) for i, node in enumerate(graph.node) if i not in set(gone)]
    body_outputs = {o.name for o in graph.output}
    needed = {name for _, node in kept for name in node_reads(node)} | body_outputs
    through = _passthrough(scope)
    rename = dict(outer_rename)
    rewired = _rewire(scope, kept, lost, through)
    needed -= set(rewired) - {name for _, node in kept for name in node_reads(node)}
    for name in sorted(lost & needed):
        if name in through:
            rename[name] = through[name]
            continue
        tensor_type = scope.types.get(name)
        if not has_shape(tensor_type):
            raise ValueError(f"body tensor '{name}' has no known shape and cannot be hoisted")
        assert tensor_type is not None
        taken = [*hoisted, name] if name in body_outputs else list(hoisted)  # an output gets an Identity
        hoist = plan.hoist_name(name, taken)
        hoisted[hoist] = tensor_type
        rename[name] = hoist
    out = onnx.GraphProto()
    out.CopyFrom(graph)
    del out.node[:]
    for i, node in kept:
        out.node.append(_edit_node(plan, f"{scope_path}/{i}", node, removed, rename, hoisted))
    for info in out.output:
        if info.name not in lost:
            continue
        if info.name in through:
            info.name = through[info.name]
        elif info.name in rewired:
            info.name = rewired[info.name]
        else:
            out.node.append(helper.make_node("Identity", [rename[info.name]], [info.name], name=f"{info.name}/hoisted"))
    value_names = {name for node in out.node for name in node.output}
    kept_info = [vi for vi in out.value_info if vi.name in value_names]
    del out.value_info[:]
    out.value_info.extend(kept_info)
    return out


def _rewire(
    scope: Scope, kept: list[tuple[int, onnx.NodeProto]], lost: set[str], through: dict[str, str]
) -> dict[str, str]:
    """Body outputs that lost their producer and may be rewired to a tensor the body still has
    (a kept node's output, latest first, or a body input) of the same type and shape, one that
    no other output names where there is one: no plumbing node needed. A Loop body may list a
    name twice (the checker and onnxruntime accept it); an If branch may not (onnxruntime mixes
    up the If's outputs)."""
    graph = scope.graph
    available = [name for _, node in reversed(kept) for name in node.output if name]
    available += [info.name for info in graph.input]
    taken = {o.name for o in graph.output if o.name not in lost} | set(through.values())
    rewired: dict[str, str] = {}
    for info in graph.output:
        name = info.name
        wanted = scope.types.get(name)
        if name not in lost or name in through or not has_shape(wanted):
            continue
        matching = [a for a in available if scope.types.get(a) == wanted]
        fresh = [a for a in matching if a not in taken]
        match = fresh[0] if fresh else (matching[0] if matching and scope.owner == "Loop" else None)
        if match is not None:
            rewired[name] = match
            taken.add(match)
    return rewired


def _rename_reads(graph: onnx.GraphProto, rename: dict[str, str]) -> None:
    """Rename what a nested graph reads from enclosing scopes (names are unique: SSA)."""
    if not rename:
        return
    for node in graph.node:
        node.input[:] = [rename.get(name, name) for name in node.input]
        for sub in subgraphs_of(node):
            _rename_reads(sub, rename)


def _inline(plan: BodyPlan, n: int, edited: onnx.NodeProto, hoisted: dict[str, onnx.TypeProto]) -> Edited:
    """Top-level node ``n`` replaced by the nodes left in its one non-empty body (the plumbing
    ``Identity`` nodes of hoisted outputs dropped)."""
    bodies = [_graph_attr(edited, attr) for attr in body_attrs(edited)]
    chosen = [g for g in bodies if any(not node.name.endswith("/hoisted") for node in g.node)]
    graph = chosen[0] if len(chosen) == 1 else bodies[0]
    types: TypeMap = {}
    for scope in plan.scopes_of(n):
        types.update(scope.types)
    nodes = [node for node in graph.node if not node.name.endswith("/hoisted")]
    return Edited(nodes, hoisted, inlined=True, types=types)


def inlinable(index: GraphIndex, top: int, removed: frozenset[str]) -> bool:
    """Whether top-level node ``top``, edited by ``removed``, has exactly one body with nodes
    left and those nodes read none of that body's inputs (no iteration state)."""
    if not body_attrs(index.nodes[top]):
        return False
    try:
        edited = edit(index, [top], removed).nodes[0]
    except ValueError:
        return False
    left = 0
    for attr in body_attrs(edited):
        graph = _graph_attr(edited, attr)
        real = [node for node in graph.node if not node.name.endswith("/hoisted")]
        if not real:
            continue
        left += 1
        inputs = {info.name for info in graph.input}
        if any(inputs & set(node_reads(node)) for node in real):
            return False
    return left == 1


def kept_count(index: GraphIndex, top: int, removed: frozenset[str]) -> int:
    """Body nodes left in top-level node ``top`` under the edits ``removed`` (all levels)."""
    total = 0
    plan = plan_for(index)
    for scope in plan.scopes_of(top):
        for i in range(len(scope.graph.node)):
            path = f"{scope.path}/{i}"
            if not any(path == r or path.startswith(r + "/") for r in removed):
                total += 1
    return total


def describe(index: GraphIndex, candidate: Candidate) -> list[str]:
    """Labels of a candidate's nodes; an edited control-flow node lists the body nodes it keeps
    (``Loop:loop [body: Erf:body/culprit]``), an inlined one says where its nodes came from."""
    labels = []
    for n in sorted(candidate.nodes):
        label = index.label(n)
        if not any(path.startswith(f"{n}/") for path in candidate.body):
            labels.append(label)
            continue
        plan = plan_for(index)
        kept = [
            f"{node.op_type}:{node.name}" if node.name else node.op_type
            for scope in plan.scopes_of(n)
            for i, node in enumerate(scope.graph.node)
            if not any(f"{scope.path}/{i}" == r or f"{scope.path}/{i}".startswith(r + "/") for r in candidate.body)
        ]
        if inline_id(n) in candidate.body:
            labels.extend(f"{k} (out of {label}'s body)" for k in kept)
        else:
            labels.append(f"{label} [body: {', '.join(kept)}]")
    return labels


def body_size(model: onnx.ModelProto) -> int:
    """Nodes counted in and out of bodies (every scope of the model)."""
    return _count(model.graph)


def _count(graph: onnx.GraphProto) -> int:
    return sum(1 + sum(_count(sub) for sub in subgraphs_of(node)) for node in graph.node)


def deep_count(index: GraphIndex, candidate: Candidate) -> int:
    """Nodes of ``candidate``'s model in and out of bodies: its top-level nodes (an inlined one
    counts the nodes it became) and the body nodes they keep (every level; ``body_size`` of the
    model it writes, less the plumbing of hoisted outputs)."""
    total = 0
    for n in candidate.nodes:
        node = index.nodes[n]
        total += 0 if inline_id(n) in candidate.body else 1
        total += sum(_kept(graph, f"{n}/{attr}", candidate.body) for attr, graph in _bodies_of(node))
    return total


def _bodies_of(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    graphs = [(attr.name, attr.g) for attr in node.attribute if attr.type == onnx.AttributeProto.GRAPH]
    graphs += [
        (f"{attr.name}.{k}", g)
        for attr in node.attribute
        if attr.type == onnx.AttributeProto.GRAPHS
        for k, g in enumerate(attr.graphs)
    ]
    return graphs


def _kept(graph: onnx.GraphProto, path: str, removed: frozenset[str]) -> int:
    total = 0
    for i, node in enumerate(graph.node):
        node_path = f"{path}/{i}"
        if node_path in removed:
            continue  # its nested bodies go with it
        total += 1 + sum(_kept(sub, f"{node_path}/{attr}", removed) for attr, sub in _bodies_of(node))
    return total
