"""Quantized weight formats (int8, int4, ternary), their packing, and the activation quantizer.

Every format uses one float32 scale per output channel, so a quantized GEMM is always a single exact
int32 product followed by the device contract's float epilogue (see ``docs/host-int.md``).
"""
from .activations import dequantize_acc, quantize_rows
from .formats import FORMATS, QuantWeight, concat_rows, quantize_weight, take_rows
from .io import FORMAT_VERSION, load_quantized, save_quantized

__all__ = [
    "FORMATS",
    "FORMAT_VERSION",
    "QuantWeight",
    "concat_rows",
    "take_rows",
    "dequantize_acc",
    "load_quantized",
    "quantize_rows",
    "quantize_weight",
    "save_quantized",
]
