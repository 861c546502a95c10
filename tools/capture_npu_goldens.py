"""Capture golden outputs of the NPU GEMM on a REAL NPU, once per artifact build or driver change.

For each golden input kind (``npu_emulator.GOLDEN_KINDS``) and seed, this runs one launch of the
artifact through pyxrt with a sentinel-filled C buffer, repeats it to check determinism, compares the
device's C bytes with the emulator bit for bit, and writes ``kernels/goldens/<manifest>.json``:
``{manifest, manifest_sha256s, design, device, driver, cases: [{seed, kind, sha256, ms}]}``.
CI (tests/device/test_goldens.py) then holds the emulator to every recorded hash.

It refuses to write anything if the device and the emulator disagree - that is a finding to report,
not a golden. Nothing has been captured yet: no real NPU has run this code.

Usage: python tools/capture_npu_goldens.py --manifest kernels/manifests/gemm_i8i32_npu2.json [--seeds 3] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifest", required=True, type=Path)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="default: kernels/goldens/<manifest name>.json")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(os.environ.get("XILINX_XRT", "/opt/xilinx/xrt"), "python"))

    from onebit_engine.gemm.npu.probe import detect_npu
    from onebit_engine.gemm.npu import emulator as npu_emulator
    from onebit_engine.gemm.npu.xrt import XrtBackend
    from onebit_engine.gemm.npu.layout import KernelManifest

    status = detect_npu()
    if not status.present:
        print(f"error: goldens must come from a real NPU: {status.reason}", file=sys.stderr)
        return 1
    man = KernelManifest.load(args.manifest)
    backend = XrtBackend(manifest=man, fallback=None, retries=0)  # opens pyxrt, checks hashes and generation
    xrt, ld, dev = backend.xrt, backend._loaded, backend._session.device
    to_dev, from_dev = xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE
    bos = [xrt.bo(dev, n, xrt.bo.host_only, ld.kernel.group_id(i)) for i, n in ((3, man.a_bytes), (4, man.b_bytes), (5, man.c_bytes))]
    sentinel = np.full(man.c_bytes // 4, -(2**31), "<i4").view(np.uint8)
    design = {"M": man.M_cap, "K": man.K, "N": man.N, "b_layout": man.b_layout, "c_layout": man.c_layout}
    cases, bad = [], 0
    for seed in range(args.seeds):
        for kind in npu_emulator.GOLDEN_KINDS:
            a, b = npu_emulator.golden_inputs(seed, kind, design)
            want = npu_emulator.run_launch(design, a, b)
            digests, times = set(), []
            for _ in range(args.repeats):
                for bo, data in zip(bos, (np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8), sentinel)):
                    bo.write(np.ascontiguousarray(data), 0)
                    bo.sync(to_dev, int(data.nbytes), 0)
                t = time.perf_counter()
                state = ld.kernel(3, ld.insts_bo, ld.insts_len, *bos).wait(10_000)
                times.append(1e3 * (time.perf_counter() - t))
                if state != xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED:
                    print(f"error: seed {seed} {kind}: run ended in {state}", file=sys.stderr)
                    return 1
                bos[2].sync(from_dev, man.c_bytes, 0)
                got = bos[2].read(man.c_bytes, 0).tobytes()
                digests.add(npu_emulator.output_digest(got))
                if got != want:
                    bad += 1
                    diff = np.flatnonzero(np.frombuffer(got, "<i4") != np.frombuffer(want, "<i4"))
                    print(f"MISMATCH seed {seed} {kind}: {diff.size} int32 outputs differ, first at {diff[:5].tolist()}")
            if len(digests) != 1:
                print(f"NONDETERMINISTIC seed {seed} {kind}: {len(digests)} different outputs over {args.repeats} runs")
                bad += 1
            cases.append({"seed": seed, "kind": kind, "sha256": digests.pop(), "ms": round(float(np.median(times)), 3)})
    if bad:
        print(f"error: {bad} device/emulator disagreements; no goldens written", file=sys.stderr)
        return 1
    out = args.out or man.root.parent / "goldens" / f"{man.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"manifest": man.name, "manifest_sha256s": {"xclbin": man.xclbin.sha256, "insts": man.insts.sha256},
              "design": design, "device": status.model, "generation": status.generation, "driver": status.driver_version,
              "firmware": status.firmware_version, "captured": time.strftime("%Y-%m-%d"), "cases": cases}
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {len(cases)} goldens to {out}; every one equals the emulator bit for bit")
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
