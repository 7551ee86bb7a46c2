"""Check kinds (the oracle of a reduction) and runtime helpers. Runtime libraries (onnxruntime,
tensorrt) are imported lazily inside the functions that need them."""
