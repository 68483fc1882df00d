"""Graph IR, ONNX import, simplifications, the numpy reference interpreter, the model zoo."""
