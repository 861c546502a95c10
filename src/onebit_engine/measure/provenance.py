"""What a measured figure was measured with: engine version and git revision, backend, row set, kernels."""
from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=1)
def git_revision() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5)
        rev = out.stdout.strip()
        if out.returncode == 0 and rev:
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=5)
            return rev + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


# Provenance keys renamed since results were first written: today's name -> the name older files carry.
RENAMED = {"ops": "recurrence"}  # the target's op table ("numpy" / "numba") was called its recurrence


def upgraded(prov: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``prov`` with each renamed key also under today's name, so that a result or stage file
    written before the rename still loads and compares (the values did not change, only the key)."""
    out = dict(prov)
    for new, old in RENAMED.items():
        if new not in out and old in out:
            out[new] = out[old]
    return out


def device_provenance(desc: dict[str, Any]) -> dict[str, Any]:
    """For a device backend: the NPU generation, driver and firmware versions (what the probe can read)."""
    if desc.get("backend") != "xrt":
        return {}
    from ..gemm.npu.probe import detect_npu

    st = detect_npu(open_device=False)
    return {"npu_generation": desc.get("generation") or st.generation, "npu_model": st.model,
            "npu_driver": st.driver, "npu_driver_version": st.driver_version, "npu_firmware_version": st.firmware_version}


def run_provenance(target, **extra: Any) -> dict[str, Any]:
    from ..version import __version__

    desc = target.backend.describe()
    return {**device_provenance(desc),
        "engine_version": __version__, "git_revision": git_revision(), "backend": desc.get("backend"),
        "kernel_set": desc.get("kernel_set"), "kernel_hash": desc.get("manifest_hash") or desc.get("hash"),
        "backend_events": desc.get("events"), "row_set": target.row_set,
        "ops": getattr(getattr(target, "ops", None), "name", None),
        "delta_rule": getattr(getattr(target, "ops", None), "delta", None) or None,  # numba, native-avx512, ...
        "model_type": target.config.model_type,
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}", **extra,
    }


def plain_provenance(target, *, temperature: float = 0.0) -> dict[str, Any]:
    """``run_provenance`` of a plain decoding run (``loop.generate``), for a caller that reports it."""
    return run_provenance(target, mode="plain", temperature=temperature)


def loop_provenance(target, draft, *, k: int, commit_path: str = "keep", temperature: float = 0.0, fallback=None,
                    verify_stages: "str | int" = "one") -> dict[str, Any]:
    """``run_provenance`` of a speculative run (``loop.speculative_generate``) of ``draft`` with ``k`` drafts
    per round: plus the draft's backend (and NPU, on a device) and version, the fallback policy
    (None, its name, or "custom" for a callable) and the verify's pass rule (``loop/stages.py``). The loop
    itself computes none of it (no git, no probe)."""
    draft_desc = getattr(getattr(draft, "backend", None), "describe", lambda: {})()
    return run_provenance(
        target, mode="speculative", commit_path=commit_path, k=k, temperature=temperature,
        draft_backend=draft_desc.get("backend"), draft_kernel_set=draft_desc.get("kernel_set"),
        draft_backend_events=draft_desc.get("events"),
        **{f"draft_{key}": v for key, v in device_provenance(draft_desc).items()}, draft_version=getattr(getattr(draft, "config", None), "version", None),
        fallback=None if fallback is None else (fallback if isinstance(fallback, str) else "custom"),
        verify_stages=verify_stages,
    )


def checkpoint_hash(folder: "str | Path") -> str:
    """sha256 over a checkpoint's files (config.json, *.safetensors, the shard index), in name order.

    The file names are hashed with the bytes, so a renamed shard changes the hash. A single file
    (a quantized weight file) is hashed on its own.
    """
    import hashlib

    p = Path(folder)
    if p.is_file():
        files = [p]
    else:
        files = sorted(f for f in p.iterdir() if f.is_file() and (f.suffix in (".json", ".safetensors")))
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def machine() -> dict[str, Any]:
    """The host, for a benchmark's provenance: architecture, CPU model and flags, logical / physical /
    usable CPUs, Python, numpy and its BLAS. A field this host does not expose is None."""
    import os

    import numpy as np

    model, flags, cores = None, None, set()
    try:
        phys = None
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = (part.strip() for part in line.partition(":"))
            if key == "model name" and model is None:
                model = val
            elif key in ("flags", "Features") and flags is None:  # x86 / arm
                flags = " ".join(sorted(set(val.split())))
            elif key == "physical id":
                phys = val
            elif key == "core id":
                cores.add((phys, val))
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"arch": platform.machine(), "cpu": model or platform.processor() or None, "cpu_flags": flags, "logical_cpus": os.cpu_count(),
            "physical_cores": len(cores) or None, "usable_cpus": usable, "system": platform.system(),
            "python": platform.python_version(), "numpy": np.__version__, "blas": blas_info()}


def blas_info() -> dict[str, Any] | None:
    """numpy's BLAS: the build's (``numpy.show_config``) and, with threadpoolctl, the library loaded now
    (name, version, architecture; not its thread count, which ``threads`` records)."""
    import numpy as np

    info: dict[str, Any] = {}
    try:
        deps = (np.show_config(mode="dicts") or {}).get("Build Dependencies", {})
        blas = deps.get("blas", {}) if isinstance(deps, dict) else {}
        info = {k: blas.get(src) for k, src in (("name", "name"), ("version", "version"), ("config", "openblas configuration"))}
    except (TypeError, ValueError, AttributeError):  # numpy < 1.25 has no mode="dicts"
        pass
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        info["runtime"] = None
    else:
        info["runtime"] = [{k: lib.get(k) for k in ("internal_api", "version", "architecture", "threading_layer")}
                           for lib in threadpool_info() if lib.get("user_api") == "blas"]
    return info or None


def prompt_set_hash(prompts) -> str:
    """sha256 of a prompt set's token ids (order kept): two results compare only on the same prompts."""
    import hashlib
    import json

    ids = [[int(t) for t in p] for p in prompts]
    return hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


def pair_provenance(target, *, model_hash: str, draft=None, draft_hash: str | None = None, **extra: Any) -> dict[str, Any]:
    """``run_provenance`` plus what identifies the pair: checkpoint sha256s, the kernel manifest hash,
    the backend's options and the draft's backend (the draft's projections may run elsewhere)."""
    desc = target.backend.describe()
    prov = run_provenance(target, **extra)
    prov.update(kernel_hash=desc.get("hash"), backend_options={k: desc[k] for k in ("weight_format", "threads", "kernel") if k in desc},
                model_hash=model_hash, draft_hash=draft_hash)
    if draft is not None:
        dbe = _draft_backend(draft)
        prov.update(draft_backend=dbe.get("backend"), draft_kernel_set=dbe.get("kernel_set"), draft_kernel_hash=dbe.get("hash"),
                    draft_ops=getattr(getattr(draft, "ops", None), "name", None),
                    draft_version=draft.config.version, block_size=draft.config.block_size)
    return prov


def _draft_backend(draft) -> dict[str, Any]:
    fc = getattr(draft, "fc", None)
    be = getattr(fc, "backend", None)
    return be.describe() if be is not None else {}
