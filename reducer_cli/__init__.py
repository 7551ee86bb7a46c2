"""The ``onnx-reducer`` command line: an adapter around ``reducer_core``."""
