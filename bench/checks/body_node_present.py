"""Fails when the named node is present in any scope of the model (Loop/If bodies included):
``body_node_present.py MODEL --node NAME``. Prints the node count in and out of bodies."""

import argparse

import onnx
from _common import finish


def names(graph: onnx.GraphProto) -> list[str]:
    found = []
    for node in graph.node:
        found.append(node.name)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found.extend(names(attr.g))
            for sub in attr.graphs:
                found.extend(names(sub))
    return found


parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--node", required=True)
args = parser.parse_args()
present = names(onnx.load(args.model, load_external_data=False).graph)
finish("body_node_present", args.node in present, len(present), f"node {args.node} present")
