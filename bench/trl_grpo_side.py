#!/usr/bin/env python3
"""TRL's side of bench/rl_vs_trl_bench.py: GRPOTrainer on CPU with the settings furlong runs.

Usage: trl_grpo_side.py MODEL_DIR DATA_DIR WORK_DIR bf16|fp32 STEPS THREADS SETTINGS_JSON

One optimizer step per generation batch (steps_per_generation 1, num_iterations 1: TRL then
uses the step's own log-probs, detached, as the old policy's, as furlong's --old-logprobs auto
does), loss_type "grpo" (each sample's token mean, averaged: miles' and furlong's default),
group-std reward scaling, no KL (beta 0), no activation checkpointing (TRL turns it on by
default; furlong does not, and memory is no constraint at this size). bf16 is TRL's mixed precision (autocast over fp32
weights), the counterpart of furlong's bf16 compute with fp32 masters. Writes WORK_DIR/model
(the final weights) and WORK_DIR/result.json: median step seconds (the first step left out),
generation seconds within it, the mean reward per step.
"""
import json
import re
import statistics
import sys
import time

import torch


def main():
    model_dir, data_dir, work, dtype, steps, threads, settings = sys.argv[1:8]
    steps, threads, s = int(steps), int(threads), json.loads(settings)
    torch.set_num_threads(threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = [json.loads(l) for l in open(f"{data_dir}/train.jsonl")]
    dataset = Dataset.from_list([{"prompt": r["prompt"], "label": r["label"]} for r in rows])

    def reward(completions, label, **_):
        out = []
        for c, want in zip(completions, label):
            text = c[0]["content"] if isinstance(c, list) else c
            nums = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
            out.append(1.0 if nums and float(nums[-1].replace(",", "")) == float(want) else 0.0)
        return out

    batch = s["prompts_per_step"] * s["group"]
    config = GRPOConfig(
        output_dir=f"{work}/trainer", per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        num_generations=s["group"], max_completion_length=s["max_new_tokens"],
        temperature=s["temperature"], learning_rate=s["lr"], lr_scheduler_type="constant",
        warmup_steps=0, adam_beta1=s["adam_beta1"], adam_beta2=s["adam_beta2"],
        adam_epsilon=s["adam_eps"], weight_decay=0.0, max_grad_norm=s["clip_grad"], beta=0.0,
        loss_type="grpo", scale_rewards="group", max_steps=steps, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=True, bf16=(dtype == "bf16"),
        seed=s["seed"], disable_tqdm=True, dataloader_num_workers=0,
        gradient_checkpointing=False)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    generation = []
    original_generate = model.generate

    def timed_generate(*a, **k):
        t0 = time.perf_counter()
        try:
            return original_generate(*a, **k)
        finally:
            generation.append(time.perf_counter() - t0)
    model.generate = timed_generate

    step_times, rewards = [], []

    class Timer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t0 = time.perf_counter()
            self.gen_before = len(generation)

        def on_step_end(self, *_, **__):
            step_times.append((time.perf_counter() - self.t0,
                               sum(generation[self.gen_before:])))

        def on_log(self, _args, _state, _control, logs=None, **__):
            if logs and "reward" in logs:
                rewards.append(logs["reward"])

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[Timer()])
    trainer.train()
    trainer.model.save_pretrained(f"{work}/model")
    tokenizer.save_pretrained(f"{work}/model")
    kept = step_times[1:] if len(step_times) > 2 else step_times
    step = statistics.median(t for t, _ in kept)
    gen = statistics.median(g for _, g in kept)
    json.dump({"step_s": step, "generation_s": gen, "train_s": step - gen, "mean_reward": rewards,
               "trl_version": __import__("trl").__version__}, open(f"{work}/result.json", "w"))


if __name__ == "__main__":
    main()
