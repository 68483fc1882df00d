"""Operator families: each declares, in one module, the ONNX operators it serves and
how they are lowered; the code they generate lives beside it in `kernels/`, their
analytic models in `autoconfig/models/`. The lowering pass (`autoconfig.build`)
gathers each module's `LOWERINGS` into its registry, and the layout plan
(`autoconfig.layouts`) asks each family how its kernels read a channel-blocked tensor.

- `elementwise`: operators of one input emitted as epilogue ops (alone, or fused after
  an anchor); their vector code and numpy meaning are `kernels.epilogue.KINDS`, and
  the operator table (`autoconfig.graph.ops`) takes their rows from here.
- `conv`: Conv, with its algorithms registered in `autoconfig.models.conv.ALGORITHMS`.
- `matmul`: Gemm and MatMul.
- `pool`: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, ReduceMean, ReduceMax.
- `softmax`: Softmax.
- `normalization`: LayerNormalization, RMSNormalization.
- `movement`: Concat, Transpose, Slice, Split, Pad, Resize, Upsample.
- `recurrent`: a Recurrence node, the steps of an LSTM, GRU or RNN layer
  (`graph.recurrent`).
- `attention`: a group of several operators, an attention core the fusion plan made
  one kernel (`fusion.classify.attention_cores`): registered under `ATTENTION`.
"""
