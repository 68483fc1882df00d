#!/usr/bin/env python3
"""Export torchvision and HuggingFace models to ONNX as a user would: random weights,
either exporter.

Each model gets random weights (seeded; parameters its initializer filled with one
value get noise) and its BatchNorm statistics recomputed on a few random batches in
train mode, so its outputs depend on its inputs (random running statistics can make an
output constant, and an equality test then proves nothing). Language models take
int64 `input_ids` and `attention_mask` and return their last hidden state.
TorchScript's exporter (`--exporter torchscript`, opset 17) writes the shape arithmetic
real files carry (Shape, Gather, Concat, ...); the dynamo exporter (`dynamo`, opset 18)
writes what torch.export traced. Segmentation models return their 'out' map.

Runs in the exporters' environment (`make exporters`: torch 2.13 CPU, torchvision 0.28,
transformers, onnxscript), never the project's.

Usage: .exporters/bin/python scripts/export_models.py --out models [--exporter both]
       [--batch 1] [--set cnns|transformers] [resnet18 vit_b_16 ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

MODELS = (
    "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "mobilenet_v2", "mobilenet_v3_small",
    "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_s", "mnasnet1_0", "shufflenet_v2_x1_0",
    "squeezenet1_1", "densenet121", "googlenet", "inception_v3", "regnet_y_400mf", "regnet_x_1_6gf", "vgg16_bn",
    "alexnet", "fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large",
)  # fmt: skip
"""The torchvision classification and segmentation families a user brings most often."""

TRANSFORMERS = ("vit_b_16", "swin_t", "convnext_tiny")
"""torchvision's vision transformers (and ConvNeXt, a CNN built like one)."""

LANGUAGE = {"bert_base": "Bert", "distilbert": "DistilBert", "gpt2": "GPT2"}
"""HuggingFace transformers' language models (their transformers class prefix), built
from their default configurations (BERT-base, DistilBERT-base, GPT-2 small)."""

SEQUENCE = 128
"""Tokens per input of the language models."""

SETS = {"cnns": MODELS, "transformers": (*TRANSFORMERS, *LANGUAGE)}

IMAGE = {"inception_v3": 299}
"""Input size per model where 224 is not its own."""

PLACEHOLDER_SPREAD = 0.2
"""Standard deviation of the noise added to a parameter its initializer filled with one
value (zero heads and biases, unit norm scales, ConvNeXt's 1e-6 layer scales):
training moves them, and left as they are they make outputs constant or blocks inert."""

STATISTICS_BATCHES = 3
"""Random batches run in train mode to set BatchNorm's running statistics."""


def _torchvision():
    """torchvision's model code: the package index's wheel is a CUDA build whose native
    library does not load beside the CPU torch, so the two operator schemas it would
    register are defined first (its models need neither)."""
    import torch

    library = torch.library.Library("torchvision", "DEF")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision

    return torchvision, library


def _main_output(model):
    """A segmentation model as one returning its 'out' map (its forward returns a dict)."""
    import torch

    class MainOutput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)["out"]

    return MainOutput()


def _redraw_placeholders(model) -> None:
    """Noise added to every parameter its initializer filled with one value."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                p.add_(torch.randn_like(p) * PLACEHOLDER_SPREAD)


def _language_model(name: str):
    """A transformers model with random weights returning its last hidden state, with
    the ids and attention mask it takes (an int64 batch of one, padded at the end)."""
    import torch
    import transformers

    prefix = LANGUAGE[name]
    config = getattr(transformers, f"{prefix}Config")()
    model = getattr(transformers, f"{prefix}Model")(config)
    _redraw_placeholders(model)

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state

    ids = torch.randint(0, config.vocab_size, (1, SEQUENCE))
    mask = torch.ones(1, SEQUENCE, dtype=torch.int64)
    mask[:, SEQUENCE * 7 // 8 :] = 0
    return LastHidden().eval(), (ids, mask), ["input_ids", "attention_mask"]


def make_model(name: str, torchvision, seed: int = 0):
    """The torchvision model with random weights (placeholders redrawn) and recomputed
    BatchNorm statistics, in eval mode."""
    import torch

    torch.manual_seed(seed)
    kwargs = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs |= {"aux_logits": False, "init_weights": True}
    if name.startswith(("fcn_", "deeplabv3_", "lraspp_")):
        model = _main_output(getattr(torchvision.models.segmentation, name)(weights_backbone=None, **kwargs))
    else:
        model = getattr(torchvision.models, name)(**kwargs)
    _redraw_placeholders(model)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches
    size = IMAGE.get(name, 224)
    model.train()
    with torch.no_grad():
        for _ in range(STATISTICS_BATCHES if norms else 0):
            model(torch.randn(4, 3, size, size))
    return model.eval()


def export(name: str, exporter: str, batch: int, out: Path, torchvision) -> Path:
    import torch

    if name in LANGUAGE:
        model, args, inputs = _language_model(name)
    else:
        model = make_model(name, torchvision)
        size = IMAGE.get(name, 224)
        args, inputs = (torch.randn(batch, 3, size, size),), ["input"]
    path = out / f"{name}{f'_b{batch}' if batch != 1 else ''}_{exporter}.onnx"
    torch.backends.mha.set_fastpath_enabled(False)
    with torch.no_grad():
        if exporter == "torchscript":
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17, input_names=inputs,
                              output_names=["output"])  # fmt: skip
        else:
            torch.onnx.export(model, args, str(path), dynamo=True, input_names=inputs, output_names=["output"],
                              external_data=False)  # fmt: skip
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="torchvision model names (default: those of --set)")
    parser.add_argument("--set", choices=sorted(SETS), default="cnns", help="the models written when none is named")
    parser.add_argument("--out", type=Path, required=True, help="directory for the .onnx files")
    parser.add_argument("--exporter", choices=("torchscript", "dynamo", "both"), default="both")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args(argv)
    torchvision, _ = _torchvision()
    args.out.mkdir(parents=True, exist_ok=True)
    exporters = ("torchscript", "dynamo") if args.exporter == "both" else (args.exporter,)
    failed = 0
    for name in args.models or SETS[args.set]:
        for exporter in exporters:
            start = time.perf_counter()
            try:
                path = export(name, exporter, args.batch, args.out, torchvision)
            except Exception as err:  # one model's failure is a line, not the end of the run
                failed += 1
                print(f"{name:<30} {exporter:<12} failed: {' '.join(str(err).split())[:200]}", flush=True)
                continue
            print(f"{name:<30} {exporter:<12} {path} ({time.perf_counter() - start:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
