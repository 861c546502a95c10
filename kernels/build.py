"""Build the NPU GEMM artifacts (xclbin + instruction stream) and record their sha256 in the manifests.

``nox -s kernels`` runs this. It first checks the toolchain and stops with a clear message naming
everything that is missing:

* the ``mlir_aie`` Python package (IRON; ``import aie``) and its ``aiecc`` driver (``aiecc`` or ``aiecc.py``);
* Peano (``llvm-aie``): ``$PEANO_INSTALL_DIR/bin/clang++``, or the ``llvm-aie`` pip package.

None of them is on PyPI: ``pip install mlir_aie -f https://github.com/Xilinx/mlir-aie/releases/expanded_assets/<tag>``
and ``pip install llvm-aie -f https://github.com/Xilinx/llvm-aie/releases/expanded_assets/nightly``.

Then, per manifest in ``kernels/manifests/``: compile ``gemm_i8i32/mm_i8i32.cc`` with Peano for the
generation's AIE architecture, emit the design's MLIR with ``gemm_i8i32/whole_array_i8i32.py``, run
aiecc to produce ``build/<name>.xclbin`` and ``build/<name>.insts.bin``, and write both sha256 into the
manifest (``built: true``). The compile and aiecc flags follow mlir-aie's matrix_multiplication
Makefiles; this script has NOT been run (no toolchain where it was written) - expect to adjust flags
to the mlir-aie release you install, and keep the manifest fields in step with the design.

Usage: python kernels/build.py [--check] [--only NAME]
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
ARCH = {"npu1": ("npu", "aie2"), "npu2": ("npu2", "aie2p")}


def find_toolchain() -> tuple[dict[str, str], list[str]]:
    found, missing = {}, []
    if importlib.util.find_spec("aie") is None:
        missing.append("the mlir_aie Python package (IRON; `import aie` fails): pip install mlir_aie -f "
                       "https://github.com/Xilinx/mlir-aie/releases/expanded_assets/<tag>")
    else:
        found["mlir_aie"] = "importable"
    aiecc = shutil.which("aiecc") or shutil.which("aiecc.py")
    if aiecc is None:
        missing.append("aiecc (the mlir-aie compiler driver, installed with mlir_aie) is not on PATH")
    else:
        found["aiecc"] = aiecc
    peano = os.environ.get("PEANO_INSTALL_DIR")
    if not peano and importlib.util.find_spec("llvm_aie") is not None:
        peano = str(Path(importlib.util.find_spec("llvm_aie").origin).parent)
    if not peano or not (Path(peano) / "bin" / "clang++").exists():
        missing.append("Peano (llvm-aie): set PEANO_INSTALL_DIR to a directory with bin/clang++, or pip install "
                       "llvm-aie -f https://github.com/Xilinx/llvm-aie/releases/expanded_assets/nightly")
    else:
        found["peano"] = peano
    return found, missing


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def build_one(manifest_path: Path, tools: dict[str, str]) -> None:
    man = json.loads(manifest_path.read_text())
    name, gen, des = man["name"], man["generation"], man["design"]
    dev, arch = ARCH[gen]
    m, k, n = des["tile"]["m"], des["tile"]["k"], des["tile"]["n"]
    work = BUILD / name
    work.mkdir(parents=True, exist_ok=True)
    obj = work / f"mm_i8i32_{m}x{k}x{n}.o"
    run([str(Path(tools["peano"]) / "bin" / "clang++"), "-O2", "-std=c++20", f"--target={arch}-none-unknown-elf",
         "-Wno-parentheses", "-Wno-attributes", "-Wno-macro-redefined", "-DNDEBUG",
         f"-DDIM_M={m}", f"-DDIM_K={k}", f"-DDIM_N={n}", "-c", str(HERE / "gemm_i8i32" / "mm_i8i32.cc"), "-o", str(obj)])
    mlir = work / f"{name}.mlir"
    with open(mlir, "w") as out:
        run([sys.executable, str(HERE / "gemm_i8i32" / "whole_array_i8i32.py"), "--dev", dev,
             "-M", str(des["M_cap"]), "-K", str(des["K"]), "-N", str(des["N"]),
             "-m", str(m), "-k", str(k), "-n", str(n), "--n-cols", str(des["n_cols"])], stdout=out)
    xclbin, insts = BUILD / f"{name}.xclbin", BUILD / f"{name}.insts.bin"
    run([tools["aiecc"], "--no-aiesim", "--no-xchesscc", "--no-xbridge", f"--peano={tools['peano']}",
         "--aie-generate-xclbin", f"--xclbin-name={xclbin}", f"--xclbin-kernel-name={man['abi']['kernel']}",
         "--aie-generate-npu-insts", f"--npu-insts-name={insts}", str(mlir)], cwd=work)
    man["artifacts"]["xclbin"]["sha256"] = sha256(xclbin)
    man["artifacts"]["insts"]["sha256"] = sha256(insts)
    man["built"] = True
    man.pop("note", None)
    manifest_path.write_text(json.dumps(man, indent=2) + "\n")
    print(f"built {name}: xclbin {man['artifacts']['xclbin']['sha256'][:16]}..., insts {man['artifacts']['insts']['sha256'][:16]}...")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Build the NPU GEMM artifacts (see the module docstring).")
    p.add_argument("--check", action="store_true", help="only check the toolchain")
    p.add_argument("--only", metavar="NAME", help="build one manifest (e.g. gemm_i8i32_npu2)")
    args = p.parse_args(argv)
    tools, missing = find_toolchain()
    if missing:
        print("error: cannot build the NPU kernels; missing:\n  - " + "\n  - ".join(missing), file=sys.stderr)
        print("see kernels/README.md and docs/device.md", file=sys.stderr)
        return 2
    print("toolchain: " + ", ".join(f"{k}={v}" for k, v in tools.items()))
    if args.check:
        return 0
    manifests = sorted((HERE / "manifests").glob("*.json"))
    if args.only:
        manifests = [m for m in manifests if m.stem == args.only]
        if not manifests:
            print(f"error: no manifest named {args.only!r} in {HERE / 'manifests'}", file=sys.stderr)
            return 2
    for mp in manifests:
        build_one(mp, tools)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
