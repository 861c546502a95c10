"""Sessions: ``host`` (CI, no NPU), ``device`` (needs an NPU; fails without one), ``bench``
(benchmarks, writes docs/benchmarks.md), ``bench-scale`` (real model shapes, the scale table of that page),
``kernels`` (needs the mlir-aie toolchain), ``train`` (the built-in pair), ``llama`` / ``mlx`` (the specverify
battery on llama.cpp / mlx-lm, on 4 seeds), ``lint``. Every session forwards ``session.posargs``."""
from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["host"]
nox.options.reuse_existing_virtualenvs = True

# torch is pinned to the CPU build this platform carries; a bare "torch" would pull a CUDA build.
TORCH = "torch==2.13.0"
# One BLAS / OpenMP thread: on a 2-core machine a competing busy thread made 2-thread OpenBLAS 2-2.5x
# slower, and measured ratios must not depend on who else is running.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


# llama-cpp-python builds llama.cpp from its sdist. The port needs only libllama and libggml (the low-level API):
# no mtmd / llava, tests, tools, examples, server or app, and no common library - which the sdist's CMakeLists
# forces on, so a project-include file switches it off again (tools/llama_cpp_build/no_common.cmake). Measured
# on 2 shared cores: 83 ninja steps, 332 s (untrimmed: 194 steps, 13+ min). pip caches the built wheel.
LLAMA_CPP = "llama-cpp-python==0.3.36"
LLAMA_CMAKE_ARGS = " ".join([
    "-DLLAVA_BUILD=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_MTMD=OFF",
    "-DCMAKE_PROJECT_INCLUDE=" + os.path.abspath("tools/llama_cpp_build/no_common.cmake"),
])
SEEDS = ("0", "1", "2", "3")


def _install(session: nox.Session, extras: str) -> None:
    session.install("--upgrade", "pip")
    session.install(TORCH)
    if "llama" in extras.split(","):
        session.install("--no-binary", "llama-cpp-python", LLAMA_CPP,
                        env={"CMAKE_ARGS": LLAMA_CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": "2"})
    session.install("-e", f".[{extras}]")
    # z-lab's DFlash reference (torch): its own pins (datasets, an older transformers) are not needed to
    # import dflash.model, so it is installed without them.
    session.install("--no-deps", "dflash==0.1.0")


@nox.session(python="3.11")
def host(session: nox.Session) -> None:
    """The whole host test suite (no NPU): engine, HF/DFlash oracles, plugin, fake-XRT device side, and the
    specverify battery on the three outside engines (transformers, llama.cpp - built trimmed, ~6 min - and mlx-lm)."""
    _install(session, "test,oracle,fast,cli,train,llama,mlx")
    session.run(
        "pytest", "-p", "no:cacheprovider", "-n", os.environ.get("PYTEST_WORKERS", "2"), "--benchmark-skip",
        # numba keeps its threads: a test pins that the host-int bits do not depend on the thread count
        *session.posargs, env={"HYPOTHESIS_PROFILE": "ci", **{k: v for k, v in ONE_THREAD.items() if k != "NUMBA_NUM_THREADS"}},
    )


@nox.session(python="3.11", default=False, tags=["bench"])
def bench(session: nox.Session) -> None:
    """Benchmarks (pytest-benchmark, one process, ratios taken in one run), then docs/benchmarks.md."""
    _install(session, "test,oracle,fast,cli,bench")
    env = {"ONEBIT_BENCH": "1", **ONE_THREAD}
    os.makedirs(".bench", exist_ok=True)  # pytest-benchmark does not create the folder of --benchmark-json
    session.run("pytest", "tests/bench", "-p", "no:xdist", "-p", "no:cacheprovider", "--benchmark-enable",
                "--benchmark-only", "--benchmark-json=.bench/bench.json", *session.posargs, env=env)
    # The page is rendered from this very run (plus the host-int report's own measurements), not a second one.
    session.run("python", "tools/make_benchmarks_md.py", "--from-json", ".bench/bench.json", "--command", "nox -s bench",
                env=env)


@nox.session(python="3.11", default=False, tags=["bench"], name="bench-scale")
def bench_scale(session: nox.Session) -> None:
    """Real model shapes, synthesized (needs ~16 GiB of memory, ~35 GB of disk, ~40 min on a Zen 4, ~75 on a Zen 3): docs/benchmarks.md's
    scale table of this CPU's host-int path (avx512vnni: the main one; avx2: its own section) and docs/loop.md's regime map."""
    session.install("--upgrade", "pip")
    session.install("-e", ".[fast,cli]")
    # BLAS and numba at one thread as everywhere: the GEMM backend's own pool takes the cores each row asks for
    session.run("python", "tools/scale_report.py", "--write", "docs/benchmarks.md", "--write-regime", "docs/loop.md",
                *session.posargs, env=ONE_THREAD)


@nox.session(python="3.11", default=False, tags=["device"])
def device(session: nox.Session) -> None:
    """Needs an AMD XDNA NPU and XRT's pyxrt: fails with the reason when there is none."""
    # pyxrt ships with XRT, not PyPI: the venv sees the system's site-packages and XRT's python dir.
    xrt = os.environ.get("XILINX_XRT", "/opt/xilinx/xrt")
    env = {"PYTHONPATH": os.path.join(xrt, "python"), **ONE_THREAD}
    # Fail fast, before the heavy install, when there is no NPU (the check needs only the light deps).
    session.install("numpy", "safetensors")
    session.run("python", "tools/device_check.py", env={**env, "PYTHONPATH": os.pathsep.join(["src", env["PYTHONPATH"]])})
    _install(session, "test,oracle,fast,cli,bench")
    session.run("pytest", "-p", "no:cacheprovider", "-m", "device or replay_check", "--specverify-require-device",
                "--benchmark-enable", *session.posargs, env=env)


@nox.session(python="3.11", default=False, tags=["kernels"])
def kernels(session: nox.Session) -> None:
    """Build the NPU GEMM artifacts (needs mlir-aie / IRON, aiecc and Peano; says what is missing)."""
    session.install("numpy")
    session.run("python", "kernels/build.py", *session.posargs)


@nox.session(python="3.11", default=False)
def train(session: nox.Session) -> None:
    """Retrain the built-in target + DFlash 2 pair on the CPU (see docs/trained-pair.md)."""
    _install(session, "train,fast")
    session.run("python", "tools/train_pair.py", *session.posargs, env={"OMP_NUM_THREADS": "2"})


def _battery_on_seeds(session: nox.Session, battery: str, port_tests: str) -> None:
    session.run("pytest", "-p", "no:cacheprovider", "-n", "2", port_tests, *session.posargs, env=ONE_THREAD)
    for seed in SEEDS:
        session.run("pytest", "-p", "no:cacheprovider", "-n", "2", battery, "--specverify-seed", seed, *session.posargs,
                    env=ONE_THREAD)


@nox.session(python="3.11", default=False)
def llama(session: nox.Session) -> None:
    """llama.cpp: builds llama-cpp-python trimmed (see LLAMA_CMAKE_ARGS), then the adapter's tests and its battery
    on seeds 0..3 (its tiny checkpoints are made here: seeded random weights -> HF folder -> GGUF)."""
    _install(session, "test,oracle,llama")
    _battery_on_seeds(session, "tests/specverify/battery/llama_cpp", "tests/specverify/adapters/test_llama_cpp_port.py")


@nox.session(python="3.11", default=False)
def mlx(session: nox.Session) -> None:
    """mlx-lm on MLX's CPU wheel: the adapter's tests and its battery on seeds 0..3, with the exact profile."""
    _install(session, "test,oracle,mlx")
    _battery_on_seeds(session, "tests/specverify/battery/mlx_lm", "tests/specverify/adapters/test_mlx_lm_port.py")


@nox.session(python="3.11", default=False)
def lint(session: nox.Session) -> None:
    """ruff over the packages, tests, tools and this file."""
    session.install("ruff")
    session.run("ruff", "check", "--select", "E9,F", "src", "tests", "tools", "noxfile.py", *session.posargs)
