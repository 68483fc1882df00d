"""Operator families: each declares, in one module, the ONNX operators it serves and
everything the compiler's passes need about them; the code they generate lives beside
it in `kernels/`. The operator table (`autoconfig.graph.ops`) and the builder read
the families' declarations.

- `elementwise`: operators of one input emitted as epilogue ops (alone, or fused after
  an anchor); their vector code and numpy meaning are `kernels.epilogue.KINDS`.
"""
