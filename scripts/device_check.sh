#!/usr/bin/env bash
# One command for the GPU machine (one H200, 16 cores, no network, python3 with a CUDA torch, nvcc,
# cmake, ninja; none of furlong's Debian -dev packages). docs/gpu.md says how to run it.
#   bash scripts/device_check.sh OUT_DIR              on the GPU machine (must fit 8 minutes)
#   bash scripts/device_check.sh --dry-run OUT_DIR    here, on CPU (CI runs it after `make test`)
# It
#   1. unpacks the carried .debs (.device-debs/, scripts/fetch_device_debs.sh) with dpkg -x into
#      build-device/deps (never into /), configures build-device/ against that prefix and the
#      machine's own torch (cmake/Dependencies.cmake: FURLONG_DEPS_PREFIX) and builds only the
#      targets below, -j$(nproc), ccache off;
#   2. runs the CUDA test subset (tests/cuda: parity with the CPU fp32 path, trainer-vs-engine
#      |dlogp| in bf16 with and without exact log-probs, a single-rank FSDP step, release/resume
#      memory figures, weight sync with digests);
#   3. benchmarks: the bf16 GEMM peak (measured first), train fwd+bwd at the Qwen3-1.7B shape in
#      bf16 (tokens/s and MFU against that peak), engine decode tokens/s at batch 1/64/256 at the
#      Qwen3-0.6B shape against transformers' generate on the same GPU, and one colocated GRPO
#      step at the 0.6B shape split into rollout / train / weight sync;
#   4. writes OUT_DIR/device_check.json (every figure; "dry_run" says which mode) and
#      OUT_DIR/device_check.log.
# --dry-run: the same stages on CPU with tiny shapes, reusing build/ (which `make test` built);
# the GPU-only parts are skipped and the JSON says so ("skipped" entries). The tests/cuda tests
# then skip; they also run once with FURLONG_CUDA_TESTS_ON_CPU=1 (CPU against CPU) so that their
# logic runs here. If .device-debs/ exists, the dry run also unpacks it and configures a
# throwaway build directory against the prefix (the check that CMake finds everything there).
# Each stage has its own time limit; past DEVICE_CHECK_BUDGET_S (default 450 s) the remaining
# stages are skipped and recorded as such, so a partial run still leaves its JSON.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
[ $# -eq 1 ] || { echo "usage: $0 [--dry-run] OUT_DIR" >&2; exit 2; }
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
BUDGET=${DEVICE_CHECK_BUDGET_S:-450}
JOBS=${JOBS:-$(nproc)}
START=$(date +%s)
LOG=$OUT/device_check.log
: >"$LOG"
if ((DRY)); then
  BUILD=${DEVICE_CHECK_BUILD_DIR:-build}
  PY=${FURLONG_DEVICE_PYTHON:-$ROOT/.venv/bin/python}
  WORK=$ROOT/$BUILD/device-check
else
  BUILD=${DEVICE_CHECK_BUILD_DIR:-build-device}
  PY=${FURLONG_DEVICE_PYTHON:-$(command -v python3)}
  WORK=$ROOT/$BUILD/device-check
fi
mkdir -p "$WORK"
PARTS=$WORK/parts
rm -rf "$PARTS" && mkdir -p "$PARTS"
export FURLONG_NO_PROGRESS=1 FURLONG_LOG_LEVEL=${FURLONG_LOG_LEVEL:-warn}

say() { printf '[device-check %4ds] %s\n' "$(($(date +%s) - START))" "$*" | tee -a "$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# part NAME JSON: one stage's figures, merged into device_check.json at the end.
part() { printf '%s\n' "$2" >"$PARTS/$1.json"; }
skip() { say "SKIPPED $1: $2"; part "$1" "{\"skipped\": \"$2\"}"; }
# run_logged LIMIT_S CMD...: runs CMD with a time limit (at most what is left of the budget, at
# least 5 s), its output appended to the log.
run_logged() {
  local limit=$1 l
  l=$(left)
  ((l < limit)) && limit=$((l > 5 ? l : 5))
  shift
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
}
# stage NAME MIN_S: false (and recorded as skipped) when less than MIN_S of the budget is left.
stage() {
  if (($(left) < $2)); then
    skip "$1" "time budget (${BUDGET}s) spent before this stage"
    return 1
  fi
  say "== $1"
}
pyrun() { env -u LD_LIBRARY_PATH "$PY" "$@"; }  # the carried libraries are for furlong only

# ---- 4. the JSON: written on every exit, also an early one (what ran is in it) ----
write_json() {
  pyrun - "$PARTS" "$OUT/device_check.json" "$DRY" "$(($(date +%s) - START))" <<'EOF' || true
import json, pathlib, sys, time
parts, out, dry, secs = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
doc = {"dry_run": dry, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": secs}
if dry:
    doc["note"] = ("dry run on CPU: tiny shapes; the CUDA tests skip (their logic ran CPU against "
                   "CPU) and nothing here measures a GPU")
for name in ["environment", "prefix_configure", "build", "cuda_tests", "gemm_peak", "train_bench",
             "decode_bench", "grpo_step"]:
    p = parts / f"{name}.json"
    try:
        doc[name] = json.loads(p.read_text()) if p.exists() else {"skipped": "did not run"}
    except ValueError:
        doc[name] = {"error": "unreadable output", "text": p.read_text()[-500:]}
json.dump(doc, open(out, "w"), indent=1)
EOF
  say "wrote $OUT/device_check.json"
}
trap write_json EXIT

# ---- 1. environment, dependencies, build ----
say "mode: $([ $DRY = 1 ] && echo 'dry run (CPU; CUDA parts skipped)' || echo 'GPU'), build dir $BUILD, python $PY, budget ${BUDGET}s"
pyrun - >"$PARTS/environment.json" 2>>"$LOG" <<EOF
import json, os, platform, subprocess, torch
gpu = None
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    gpu = {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
           "multiprocessors": p.multi_processor_count, "capability": f"{p.major}.{p.minor}"}
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=20).stdout.strip()
except OSError:
    smi = None
print(json.dumps({"torch": torch.__version__, "torch_cuda": torch.version.cuda, "gpu": gpu,
                  "nvidia_smi": smi, "cpus": os.cpu_count(), "machine": platform.machine(),
                  "python": platform.python_version()}))
EOF
cat "$PARTS/environment.json" >>"$LOG"
HAVE_GPU=$(pyrun -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)
if ((!DRY)) && [ "$HAVE_GPU" != 1 ]; then
  say "WARNING: python's torch sees no GPU; the CUDA tests will skip and the benchmarks run on CPU"
fi
DEVICE=cpu
((!DRY)) && [ "$HAVE_GPU" = 1 ] && DEVICE=cuda

unpack_debs() {  # unpack_debs PREFIX: every carried .deb, extracted (not installed) under PREFIX
  rm -rf "$1" && mkdir -p "$1"
  local f
  for f in .device-debs/*.deb; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$f" "$1" || return 1
    else  # no dpkg: a .deb is an ar archive whose data.tar.xz (Debian 12) holds the files
      (cd "$1" && ar p "$ROOT/$f" data.tar.xz | tar -xJf -) || return 1
    fi
  done
}
DEPS_ARGS=()
if ((DRY)); then
  if compgen -G ".device-debs/*.deb" >/dev/null && stage prefix_configure 60; then
    # The GPU machine's configure step, against this machine's torch: CMake must find every
    # dependency in the prefix alone (/usr is ignored for find_package and find_library).
    t0=$(date +%s)
    unpack_debs "$WORK/deps" && run_logged 300 cmake -S . -B "$WORK/build-prefix" -G Ninja \
      -DFURLONG_PYTHON="$PY" -DFURLONG_DEPS_PREFIX="$WORK/deps" -DCCACHE_PROGRAM=CCACHE_PROGRAM-NOTFOUND \
      -DCMAKE_IGNORE_PREFIX_PATH="/usr;/" -DCMAKE_SYSTEM_IGNORE_PREFIX_PATH="/usr;/"
    rc=$?
    found=$(grep -hE '^(nlohmann_json_DIR|yaml-cpp_DIR|GTest_DIR|PKG_CONFIG_EXECUTABLE|pkgcfg_lib_[A-Z0-9_]+_[a-z0-9-]+):' \
      "$WORK/build-prefix/CMakeCache.txt" 2>/dev/null | grep -c "$WORK/deps")
    part prefix_configure "{\"rc\": $rc, \"seconds\": $(($(date +%s) - t0)), \"entries_in_prefix\": $found, \"deps_mib\": $(du -sm .device-debs | cut -f1)}"
    say "prefix configure: rc $rc, $found cache entries point into the prefix"
    rm -rf "$WORK/build-prefix" "$WORK/deps"
  else
    skip prefix_configure "dry run without .device-debs/ (scripts/fetch_device_debs.sh fetches them)"
  fi
else
  compgen -G ".device-debs/*.deb" >/dev/null || { say "FAILED: no .device-debs/*.deb (carry .device-debs)"; exit 1; }
  say "unpacking $(ls .device-debs/*.deb | wc -l) .debs into $BUILD/deps"
  unpack_debs "$ROOT/$BUILD/deps" || { say "FAILED: dpkg -x"; exit 1; }
  DEPS_ARGS=(-DFURLONG_DEPS_PREFIX="$ROOT/$BUILD/deps")
  export LD_LIBRARY_PATH="$ROOT/$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# Shapes: the GPU run uses Qwen3-1.7B (train) and Qwen3-0.6B (engine, GRPO); the dry run tiny ones.
if ((DRY)); then
  TRAIN_CFG='{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 32}'
  GEN_CFG=$TRAIN_CFG
  DOCS=2 DOC_LEN=32 BATCHES="1 64 256" PROMPT=8 NEW=8 GEMM_N=256 RBS=2 NSAMP=2 RLEN=8
else
  TRAIN_CFG='{"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}'
  GEN_CFG='{"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}'
  DOCS=8 DOC_LEN=2048 BATCHES="1 64 256" PROMPT=128 NEW=128 GEMM_N=8192 RBS=8 NSAMP=8 RLEN=128
fi
BENCH_DTYPE=bfloat16
# full_config SHAPE_JSON: a Qwen3 config.json with that shape.
full_config() {
  pyrun -c "import json,sys; c=json.loads(sys.argv[1]); c.update(architectures=['Qwen3ForCausalLM'], model_type='qwen3', max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, eos_token_id=17); print(json.dumps(c))" "$1"
}
# The benchmark models, written in the background while furlong builds (random bf16 weights,
# drawn on the GPU where there is one: the 1.7B model takes ~30 s on one CPU core), each
# renamed into place only when complete.
mkdir -p "$WORK/models"
full_config "$TRAIN_CFG" >"$WORK/models/train.config.json"
full_config "$GEN_CFG" >"$WORK/models/gen.config.json"
timeout 300 env -u LD_LIBRARY_PATH "$PY" - "$WORK/models" "$DEVICE" "$ROOT/examples/tokenizers/arith" \
  train gen >"$WORK/models.log" 2>&1 <<'EOF' &
import json, os, shutil, sys, time, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
root, device, tok = sys.argv[1], sys.argv[2], sys.argv[3]
for name in sys.argv[4:]:
    out = os.path.join(root, name)
    if os.path.exists(os.path.join(out, "config.json")):
        continue
    t = time.time()
    config = Qwen3Config(**json.load(open(os.path.join(root, name + ".config.json"))))
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    model = model.to_empty(device=device).to(torch.bfloat16)
    model.tie_weights()
    gen = torch.Generator(device=device).manual_seed(1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.fill_(1.0) if "norm" in pname else p.normal_(0.0, config.initializer_range, generator=gen)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok, f), tmp)
    os.rename(tmp, out)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters in {time.time() - t:.1f} s")
    del model
EOF
MODELS_PID=$!


TARGETS=(furlong cuda_tests furlong_model_bench furlong_generate_bench)
t0=$(date +%s)
if [ ! -f "$BUILD/build.ninja" ]; then
  say "configuring $BUILD against $(pyrun -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  # That machine's compiler is not the one CI checks -Werror with: its new warnings must not
  # cost the one run, so a launcher appends -Wno-error (the last -W(no-)error wins).
  printf '#!/bin/sh\nexec "$@" -Wno-error\n' >"$WORK/no-werror"
  chmod +x "$WORK/no-werror"
  run_logged 300 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFURLONG_PYTHON="$PY" -DCCACHE_PROGRAM=CCACHE_PROGRAM-NOTFOUND \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$WORK/no-werror" "${DEPS_ARGS[@]}" ||
    { say "FAILED: configure (see the log)"; tail -40 "$LOG"; exit 1; }
fi
say "building ${TARGETS[*]} (-j$JOBS)"
run_logged $(($(left) > 60 ? $(left) : 60)) ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}"
rc=$?
part build "{\"rc\": $rc, \"seconds\": $(($(date +%s) - t0)), \"targets\": \"${TARGETS[*]}\"}"
if ((rc)); then
  say "FAILED: build (rc $rc); the errors:"
  grep -E "error|FAILED" "$LOG" | head -30 | tee -a "$LOG"
fi
FURLONG=$ROOT/$BUILD/furlong

# ---- 2. the CUDA test subset ----
if ((rc == 0)) && stage cuda_tests 30; then
  export FURLONG_DEVICE_CHECK_RECORDS=$WORK/records.jsonl
  rm -f "$FURLONG_DEVICE_CHECK_RECORDS"
  t0=$(date +%s)
  (cd "$BUILD" && run_logged 300 ctest -L cuda --output-on-failure -j 1)
  trc=$?
  skipped=$(grep -c "Skipped" "$LOG")
  cpu_rc=null
  if ((DRY)); then  # the tests' own logic, CPU against CPU
    (cd "$BUILD" && FURLONG_CUDA_TESTS_ON_CPU=1 run_logged 300 ctest -L cuda --output-on-failure)
    cpu_rc=$?
  fi
  pyrun - "$FURLONG_DEVICE_CHECK_RECORDS" "$trc" "$cpu_rc" "$skipped" "$(($(date +%s) - t0))" \
    >"$PARTS/cuda_tests.json" <<'EOF'
import json, os, sys
path, rc, cpu_rc, skipped, secs = sys.argv[1:]
records = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
print(json.dumps({"rc": int(rc), "rc_on_cpu": None if cpu_rc == "null" else int(cpu_rc),
                  "skip_lines": int(skipped), "seconds": int(secs), "records": records}))
EOF
  unset FURLONG_DEVICE_CHECK_RECORDS
  say "cuda tests: rc $trc$([ $DRY = 1 ] && echo ", CPU-against-CPU rc $cpu_rc")"
fi

# ---- 3. benchmarks ----

# make_model NAME CONFIG_JSON: the benchmark model's directory, from the background writer
# below or else made now by `furlong init-model` (bf16), with the arithmetic tokenizer (the
# benchmarks feed token ids; decoding tolerates ids past its vocabulary).
make_model() {
  local dir=$WORK/models/$1
  [ -f "$dir/config.json" ] && { echo "$dir"; return 0; }
  say "the model writer left no $1 model (see $WORK/models.log); furlong init-model instead" >&2
  mkdir -p "$WORK/models"
  full_config "$2" >"$WORK/models/$1.config.json"
  run_logged 300 "$FURLONG" init-model --config "$WORK/models/$1.config.json" \
    --tokenizer "$ROOT/examples/tokenizers/arith" --out "$dir" --seed 1 --dtype "$BENCH_DTYPE" || return 1
  echo "$dir"
}

# The model writer must be done first (waited for here, in the main shell, whose child it is).
if [ -n "${MODELS_PID:-}" ]; then
  wait "$MODELS_PID"
  say "model writer: rc $?; $(grep -E 'parameters in' "$WORK/models.log" | tr '\n' ' ')"
fi
if ((rc == 0)) && stage gemm_peak 20; then
  pyrun - "$GEMM_N" "$DEVICE" >"$PARTS/gemm_peak.json" 2>>"$LOG" <<'EOF'
import json, sys, time, torch
n, device = int(sys.argv[1]), sys.argv[2]
dtype = torch.bfloat16 if device == "cuda" else torch.float32
a = torch.randn(n, n, device=device, dtype=dtype); b = torch.randn(n, n, device=device, dtype=dtype)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
for _ in range(3): a @ b
sync(); t = time.perf_counter()
for _ in range(10): a @ b
sync(); s = (time.perf_counter() - t) / 10
print(json.dumps({"n": n, "dtype": str(dtype).removeprefix("torch."), "device": device,
                  "seconds": s, "tflops": 2 * n**3 / s / 1e12}))
EOF
  say "GEMM peak: $(cat "$PARTS/gemm_peak.json")"
fi

if ((rc == 0)) && stage train_bench 60; then
  if model=$(make_model train "$TRAIN_CFG"); then
    run_logged 240 "$ROOT/$BUILD/bench/furlong_model_bench" --hf-checkpoint "$model" --mode train \
      --dtype "$BENCH_DTYPE" --docs "$DOCS" --doc-len "$DOC_LEN" --iters 3 --warmup 1 \
      --device "$DEVICE" --threads 0
    grep '"mode":"train"' "$LOG" | grep '"tokens_per_s"' | tail -1 >"$WORK/train.json"
    pyrun - "$model/config.json" "$WORK/train.json" "$PARTS/gemm_peak.json" "$DOCS" "$DOC_LEN" \
      >"$PARTS/train_bench.json" <<'EOF'
import json, sys
cfg, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
try: peak = json.load(open(sys.argv[3]))["tflops"]
except (OSError, KeyError, ValueError): peak = None
docs, S = int(sys.argv[4]), int(sys.argv[5])
D, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
H, KV, hd, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["vocab_size"]
tokens, rows = docs * S, docs * (S - 1)
# Matmul FLOPs, forward x 3 for forward + backward: 2 per multiply-add per weight per token
# (q, k, v, o, gate, up, down), causal attention over (S + 1) / 2 keys on average (Q K^T and
# P V), and the head over the rows whose next token is scored.
per_layer = D * H * hd + 2 * D * KV * hd + H * hd * D + 3 * D * I
flops = 3 * (2 * per_layer * L * tokens + 4 * H * hd * (S + 1) / 2 * L * tokens + 2 * V * D * rows)
achieved = flops / run["median_s"] / 1e12
print(json.dumps(dict(run, flops_per_step=flops, achieved_tflops=achieved, peak_tflops=peak,
                      mfu=achieved / peak if peak else None, goal_mfu=0.40)))
EOF
    say "train: $(cat "$PARTS/train_bench.json" | head -c 400)"
  else
    skip train_bench "init-model failed (see the log)"
  fi
fi

if ((rc == 0)) && stage decode_bench 90; then
  if model=$(make_model gen "$GEN_CFG"); then
    : >"$WORK/gen.jsonl"
    for b in $BATCHES; do
      for exact in no-exact-logprobs exact-logprobs; do
        [ "$exact" = exact-logprobs ] && [ "$b" != "$(echo $BATCHES | cut -d' ' -f2)" ] && continue
        (($(left) < 30)) && break
        run_logged 150 "$ROOT/$BUILD/bench/furlong_generate_bench" --hf-checkpoint "$model" \
          --dtype "$BENCH_DTYPE" --device "$DEVICE" --batch "$b" --prompt-len "$PROMPT" \
          --max-new-tokens "$NEW" --temperature 1 --warmup 1 --"$exact" &&
          grep '"output_tokens_per_s"' "$LOG" | grep '"impl":"furlong"' | tail -1 >>"$WORK/gen.jsonl"
      done
    done
    # transformers' generate on the same device, same prompts (bench/generate_bench.py's ids).
    (($(left) > 40)) && timeout $(($(left) < 240 ? $(left) : 240)) env -u LD_LIBRARY_PATH "$PY" - "$model" "$DEVICE" "$PROMPT" "$NEW" $BATCHES \
      >>"$WORK/gen.jsonl" 2>>"$LOG" <<'EOF'
import json, sys, time, torch
from transformers import AutoModelForCausalLM
model_dir, device, prompt_len, max_new = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16,
                                             attn_implementation="sdpa").to(device).eval()
vocab = model.config.vocab_size
for batch in map(int, sys.argv[5:]):
    ids = torch.tensor([[(b * 131 + i * 31 + 7) % vocab for i in range(prompt_len)]
                        for b in range(batch)], device=device)
    kw = dict(attention_mask=torch.ones_like(ids), eos_token_id=None, pad_token_id=0,
              do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    def gen(n):
        torch.manual_seed(0)
        with torch.inference_mode():
            sync(); t = time.perf_counter()
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
            sync(); return time.perf_counter() - t, (out.shape[1] - prompt_len) * batch
    gen(min(max_new, 4))
    seconds, tokens = gen(max_new)
    print(json.dumps({"impl": "transformers", "batch": batch, "seconds": seconds,
                      "output_tokens": tokens, "output_tokens_per_s": tokens / seconds,
                      "device": device, "transformers": __import__("transformers").__version__}),
          flush=True)
EOF
    pyrun - "$WORK/gen.jsonl" $BATCHES >"$PARTS/decode_bench.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = {"runs": rows, "vs_transformers": {}, "goal_batch64_ratio": 5.0, "goal_exact_cost": 1.3}
def pick(impl, b, exact=False):
    return next((r for r in rows if r["impl"] == impl and r["batch"] == b
                 and r.get("exact_logprobs", False) == exact), None)
for b in map(int, sys.argv[2:]):
    f, t = pick("furlong", b), pick("transformers", b)
    if f and t: out["vs_transformers"][str(b)] = f["output_tokens_per_s"] / t["output_tokens_per_s"]
    fe = pick("furlong", b, True)
    if f and fe:  # time with exact log-probs / time without, at the middle batch size
        out["exact_logprobs_cost"] = f["output_tokens_per_s"] / fe["output_tokens_per_s"]
        out["exact_logprobs_batch"] = b
print(json.dumps(out))
EOF
    say "decode: $(head -c 600 "$PARTS/decode_bench.json")"
  else
    skip decode_bench "init-model failed (see the log)"
  fi
fi

if ((rc == 0)) && stage grpo_step 60; then
  model=$(make_model gen "$GEN_CFG")
  prompts=$WORK/prompts.jsonl
  pyrun -c "import json
for a in range(10):
    for b in range(10): print(json.dumps({'input': f'{a}+{b}=', 'label': str(a + b)}))" >"$prompts"
  metrics=$WORK/grpo.metrics.jsonl
  rm -f "$metrics"
  # Two rollouts: the first warms up (allocations, kernels), the second is reported.
  run_logged $(($(left) - 10)) "$FURLONG" train --hf-checkpoint "$model" --prompt-data "$prompts" \
    --label-key label --rm-type exact_match --rollout-batch-size "$RBS" \
    --n-samples-per-prompt "$NSAMP" --num-rollout 2 --rollout-max-response-len "$RLEN" \
    --lr 1e-6 --compute-dtype bfloat16 --micro-batch-size "$((RBS * NSAMP))" \
    --metrics-file "$metrics" --colocate
  grc=$?
  pyrun - "$metrics" "$grc" >"$PARTS/grpo_step.json" <<'EOF'
import json, os, sys
path, rc = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
if not rows:
    print(json.dumps({"rc": rc, "error": "no metrics written"})); sys.exit()
r = rows[-1]
rollout, train, sync = r["perf/rollout_time"], r["perf/train_time"], r["perf/update_weights_time"]
step = rollout + train + sync
print(json.dumps({"rc": rc, "rollout_index": len(rows) - 1, "rollout_s": rollout, "train_s": train,
                  "update_weights_s": sync, "step_s": step, "update_weights_fraction": sync / step,
                  "update_weights_bytes": r.get("perf/update_weights_bytes"),
                  "goal_update_weights_fraction": 0.05}))
EOF
  say "GRPO step: $(cat "$PARTS/grpo_step.json")"
fi

ok=1
grep -q '"rc": 0' "$PARTS/build.json" 2>/dev/null || ok=0
grep -q '"rc": 0' "$PARTS/cuda_tests.json" 2>/dev/null || ok=0
((ok)) && say "device check finished" || say "device check finished WITH FAILURES (see the JSON and log)"
((ok))
