#!/usr/bin/env python3
"""llama.cpp as a generation peer for bench/generate_bench.py: builds `llama-batched-bench`
from the llama.cpp vendored in PyPI's llama-cpp-python source package, converts a HF directory
to GGUF, and runs the batched bench.

Everything is cached under .cache/llama.cpp/ (source, build, GGUF files), so only the first
run downloads (`pip download llama-cpp-python --no-binary :all: --no-deps`, PyPI only),
compiles (CMake + Ninja, Release, GGML_NATIVE=ON, LLAMA_CURL=OFF, only the batched-bench
target, -j2 under /tmp/furlong-build.lock like furlong's own builds) and converts
(vendor/llama.cpp/convert_hf_to_gguf.py with its gguf-py; needs numpy, torch, transformers,
sentencepiece, safetensors, pyyaml in .venv, installed with pip when missing). The benchmark
itself runs offline.

  .venv/bin/python bench/llama_cpp.py [--build] [--isa-cap avx2]    # just build (or find) it
"""
import argparse
import glob
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
CACHE = ROOT / ".cache" / "llama.cpp"
BUILD = CACHE / "build"
BINARY = BUILD / "bin" / "llama-batched-bench"
# CMake flags of the build: for the host's own ISA (GGML_NATIVE), or capped (use_isa_cap).
ISA_FLAGS = ["-DGGML_NATIVE=ON"]
LOCK = "/tmp/furlong-build.lock"
# Modules convert_hf_to_gguf.py imports (module name -> pip package).
CONVERT_NEEDS = {"numpy": "numpy", "torch": "torch", "transformers": "transformers",
                 "sentencepiece": "sentencepiece", "safetensors": "safetensors",
                 "yaml": "pyyaml", "requests": "requests", "tqdm": "tqdm"}


def log(msg):
    print(f"[llama.cpp] {msg}", file=sys.stderr, flush=True)


def source_dir():
    """vendor/llama.cpp of the llama-cpp-python sdist, downloaded and unpacked once."""
    src = CACHE / "src"
    found = sorted(glob.glob(str(src / "llama_cpp_python-*" / "vendor" / "llama.cpp")))
    if found:
        return pathlib.Path(found[-1])
    src.mkdir(parents=True, exist_ok=True)
    log("downloading the llama-cpp-python source package from PyPI (vendors llama.cpp)")
    # pip prepares the sdist's metadata even for `download`; without build isolation that
    # needs the package's build backend in this environment.
    if importlib.util.find_spec("scikit_build_core") is None:
        log(f"pip installing scikit-build-core (llama-cpp-python's build backend) into "
            f"{sys.prefix}")
        subprocess.run([PY, "-m", "pip", "install", "-q", "scikit-build-core"], check=True,
                       timeout=900)
    subprocess.run([PY, "-m", "pip", "download", "llama-cpp-python", "--no-binary", ":all:",
                    "--no-deps", "--no-build-isolation", "-d", str(src)], check=True,
                   timeout=900)
    tars = sorted(src.glob("llama_cpp_python-*.tar.gz"))
    if not tars:
        raise SystemExit(f"pip download left no llama_cpp_python-*.tar.gz in {src}")
    log(f"unpacking {tars[-1].name}")
    subprocess.run(["tar", "xzf", str(tars[-1]), "-C", str(src)], check=True)
    found = sorted(glob.glob(str(src / "llama_cpp_python-*" / "vendor" / "llama.cpp")))
    if not found:
        raise SystemExit(f"{tars[-1]} has no vendor/llama.cpp")
    return pathlib.Path(found[-1])


def use_isa_cap(isa):
    """Builds and runs an AVX2-only llama.cpp (its own build directory, build-avx2/), to compare
    with furlong and torch capped at AVX2 on an AVX-512 CPU: GGML_NATIVE off, AVX/AVX2/FMA/F16C/
    BMI2 on, every AVX-512 extension off."""
    global BUILD, BINARY, ISA_FLAGS
    if isa != "avx2":
        raise SystemExit(f"--isa-cap: {isa} is not avx2")
    BUILD = CACHE / "build-avx2"
    BINARY = BUILD / "bin" / "llama-batched-bench"
    ISA_FLAGS = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
                 "-DGGML_F16C=ON", "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF",
                 "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF",
                 "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
                 "-DGGML_AMX_BF16=OFF"]


def ensure_binary(jobs=2):
    """Path of llama-batched-bench, built once into .cache/llama.cpp/build."""
    if BINARY.exists():
        return BINARY
    src = source_dir()
    log(f"configuring {src} -> {BUILD}")
    subprocess.run(["cmake", "-G", "Ninja", "-S", str(src), "-B", str(BUILD),
                    "-DCMAKE_BUILD_TYPE=Release", *ISA_FLAGS, "-DLLAMA_CURL=OFF",
                    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                    "-DBUILD_SHARED_LIBS=OFF"], check=True, timeout=600)
    log(f"building llama-batched-bench (ninja -j{jobs}, holding {LOCK}; ~10+ min on 2 cores)")
    t = time.time()
    subprocess.run(["flock", LOCK, "ninja", "-C", str(BUILD), f"-j{jobs}", "llama-batched-bench"],
                   check=True, timeout=3600)
    log(f"built {BINARY} in {time.time() - t:.0f} s")
    if not BINARY.exists():
        raise SystemExit(f"ninja finished but {BINARY} is missing")
    return BINARY


def version():
    """llama-cpp-python version and the vendored llama.cpp commit, where visible."""
    src = source_dir()
    out = {"llama_cpp_python": src.parent.parent.name.removeprefix("llama_cpp_python-")}
    try:
        out["llama_cpp_commit"] = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
            check=True, timeout=30).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        pass
    if BINARY.exists():
        r = subprocess.run([str(BINARY), "--version"], capture_output=True, text=True, timeout=60)
        m = re.search(r"version: (\S+) \((\S+)\)", r.stdout + r.stderr)
        if m:
            out["llama_cpp_build"] = f"{m.group(1)} ({m.group(2)})"
    return out


def ensure_convert_deps():
    """Installs into this interpreter's environment what convert_hf_to_gguf.py imports."""
    missing = [pkg for mod, pkg in CONVERT_NEEDS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        log(f"convert_hf_to_gguf.py needs {', '.join(missing)}: pip installing into "
            f"{sys.prefix}")
        subprocess.run([PY, "-m", "pip", "install", "-q", *missing], check=True, timeout=1800)


def ensure_gguf(model_dir, name, outtype):
    """GGUF (outtype f32 or bf16) of the HF directory, cached as .cache/llama.cpp/gguf/."""
    out = CACHE / "gguf" / f"{name}-{outtype}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    src = source_dir()
    ensure_convert_deps()
    log(f"converting {model_dir} -> {out}")
    tmp = out.with_suffix(".tmp")
    env = dict(os.environ, PYTHONPATH=str(src / "gguf-py"), NO_LOCAL_GGUF="")
    r = subprocess.run([PY, str(src / "convert_hf_to_gguf.py"), str(model_dir), "--outtype",
                        outtype, "--outfile", str(tmp)], env=env, capture_output=True, text=True,
                       timeout=1800)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-20:])
        raise SystemExit(f"convert_hf_to_gguf.py failed (exit {r.returncode}):\n{tail}")
    tmp.rename(out)
    return out


def run_measured(cmd, env, timeout, what):
    """Runs cmd with a wall-clock limit; returns (stdout, stderr, peak RSS in GB of that
    process, from wait4). Fails with the command and the end of its output when it fails or
    times out."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
                p.returncode = -9
                raise SystemExit(f"{what} timed out after {timeout} s: {' '.join(cmd)}")
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        tail = "\n".join((stdout + stderr).strip().splitlines()[-20:])
        raise SystemExit(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{tail}")
    return stdout, stderr, usage.ru_maxrss * 1024 / 1e9  # ru_maxrss is in KiB on Linux


def run(gguf, prompt_len, max_new, batches, threads, timeout):
    """llama-batched-bench for every batch size in one process (model loaded once, one
    warm-up decode; random prompt tokens, prompts not shared). Returns ({batch: row}, cmd)
    with output_tokens_per_s = B*TG / T (prefill + decode, model load excluded), the same
    figure the other peers report."""
    n_ctx = max(batches) * (prompt_len + max_new)
    n_batch = max(512, max(batches) * prompt_len)
    cmd = [str(ensure_binary()), "-m", str(gguf), "-c", str(n_ctx), "-b", str(n_batch),
           "-ub", str(min(n_batch, 512)), "-npp", str(prompt_len), "-ntg", str(max_new),
           "-npl", ",".join(map(str, batches)), "-t", str(threads), "-tb", str(threads),
           "-ngl", "0", "--output-format", "jsonl"]
    stdout, stderr, rss = run_measured(cmd, os.environ, timeout, "llama-batched-bench")
    text = stdout + "\n" + stderr
    rows = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{") or '"speed_tg"' not in line:
            continue
        j = json.loads(line)
        b = int(j["pl"])
        out_tokens = b * int(j["tg"])
        rows[b] = {"impl": "llama.cpp", "batch": b, "seconds": j["t"],
                   "output_tokens": out_tokens, "output_tokens_per_s": out_tokens / j["t"],
                   "prefill_s": j["t_pp"], "decode_s": j["t_tg"],
                   "prefill_tokens_per_s": j["speed_pp"], "decode_tokens_per_s": j["speed_tg"],
                   "threads": j["n_threads"], "n_kv_max": j["n_kv_max"],
                   "n_batch": j["n_batch"], "n_ubatch": j["n_ubatch"],
                   "flash_attn": j["flash_attn"], "peak_rss_gb": rss,
                   "peak_rss_note": "one process for all batch sizes"}
    missing = [b for b in batches if b not in rows]
    if missing:
        tail = "\n".join(text.strip().splitlines()[-20:])
        raise SystemExit(f"llama-batched-bench printed no row for batch {missing}: "
                         f"{' '.join(cmd)}\n{tail}")
    return rows, cmd


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", action="store_true", help="build (or find) the binary and exit")
    p.add_argument("--isa-cap", default=None, help="avx2: the AVX2-only build (use_isa_cap)")
    a = p.parse_args()
    if a.isa_cap:
        use_isa_cap(a.isa_cap)
    print(ensure_binary())
    print(json.dumps(version()))


if __name__ == "__main__":
    main()
