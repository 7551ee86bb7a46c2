"""Fails when the named node is present and a graph input has a dimension of at least ``--min-size``:
``sized_node_present.py MODEL --node A --min-size 13``. A failure that needs a large enough tensor,
so that ``--reduce-data`` has sizes to search (down to the smallest that still fails)."""

import argparse

from _common import _fields, finish, graph_fields, graph_nodes


def input_dims(path: str) -> list[int]:
    """The fixed dimensions of the graph inputs (ModelProto.graph.input[*].type.tensor_type.shape)."""
    dims: list[int] = []
    for buf, gnum, gwire, ispan in graph_fields(path):
        if gnum == 11 and gwire == 2:  # GraphProto.input
            dims += _value_info_dims(buf, ispan)
    return dims


def _value_info_dims(buf: memoryview, span: tuple[int, int]) -> list[int]:
    found: list[int] = []
    path = [2, 1, 2, 1]  # ValueInfoProto.type, TypeProto.tensor_type, .shape, TensorShapeProto.dim
    spans = [span]
    for number in path:
        spans = [v for s in spans for n, w, v in _fields(buf, *s) if n == number and w == 2]
    for dim in spans:
        found += [v for n, w, v in _fields(buf, *dim) if n == 1 and w == 0]  # Dimension.dim_value
    return found


parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--node", required=True)
parser.add_argument("--min-size", type=int, required=True)
args = parser.parse_args()
nodes = graph_nodes(args.model)
largest = max(input_dims(args.model), default=0)
present = args.node in {name for name, _ in nodes}
finish("sized_node_present", present and largest >= args.min_size, len(nodes), f"{args.node} with a size {largest}")
