"""Ports that compute a slightly different model: the transformers adapter's tiny models with one part
off by 1e-4 relative, after the correct checkpoint was saved as their reference. Each passes every check
that compares the port with itself; only the reference-agreement check sees them."""
from __future__ import annotations

# mutant -> (what it changes, the parameter or buffer names it scales by 1 + 1e-4)
MUTANTS = {
    "rotary_1e-4": ("the rotary frequencies (a rotary layout or base a hair off)", ("inv_freq",)),
    "norm_1e-4": ("every layer's input RMSNorm weight", ("input_layernorm.weight",)),
    "gate_1e-4": ("every MLP's gate projection", ("mlp.gate_proj.weight",)),
}
RELATIVE = 1e-4


def build(name: str, model: str = "tiny-qwen3_5"):
    """The transformers port of ``model`` whose ``reference_path`` is the correct checkpoint, with the part
    ``MUTANTS[name]`` names scaled by 1 + RELATIVE."""
    import torch

    from pytest_specverify.adapters.transformers import make_port
    from pytest_specverify.protocol import PortOptions

    if name not in MUTANTS:
        raise KeyError(f"no reference mutant {name!r}; known: {sorted(MUTANTS)}")
    port = make_port(PortOptions(model=model))
    suffixes = MUTANTS[name][1]
    hit = 0
    with torch.no_grad():
        for key, tensor in list(port.model.named_parameters()) + list(port.model.named_buffers()):
            if key.endswith(suffixes):
                tensor.mul_(1 + RELATIVE)
                hit += 1
    if not hit:
        raise ValueError(f"reference mutant {name!r}: no tensor of {model} ends with {suffixes}")
    port.name = f"transformers[{model}][{name}]"
    return port
