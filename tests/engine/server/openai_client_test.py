"""`furlong serve` driven by unmodified clients: the real `openai` package for /v1/completions
and /v1/chat/completions, and plain HTTP for SGLang's native endpoints (/generate with n,
penalties, min_new_tokens and log-probs, /tokenize, /detokenize, /update_weights_from_disk,
memory release and resume).

Run by ctest (tests/engine/server/CMakeLists.txt):
    python openai_client_test.py --furlong build/furlong --tokenizer .cache/tokenizers/qwen3 \
        --workdir /tmp/x
It writes two tiny random Qwen3 models, starts the server on a free 127.0.0.1 port, and kills
it at the end whatever happens. Every wait is bounded.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

import openai

API_KEY = "openai-test-key"
ARGS = None
SERVER = None  # (process, base url)


def tiny_config(hidden=64):
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "initializer_range": 0.5,
    }


def init_model(name, seed, hidden=64):
    config = os.path.join(ARGS.workdir, name + ".json")
    with open(config, "w") as f:
        json.dump(tiny_config(hidden), f)
    out = os.path.join(ARGS.workdir, name)
    subprocess.run(
        [ARGS.furlong, "init-model", "--config", config, "--tokenizer", ARGS.tokenizer,
         "--out", out, "--seed", str(seed), "--dtype", "float32"],
        check=True, timeout=300, stdout=subprocess.DEVNULL)
    return out


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model):
    port = free_port()
    log = open(os.path.join(ARGS.workdir, "serve.log"), "w")
    proc = subprocess.Popen(
        [ARGS.furlong, "serve", "--hf-checkpoint", model, "--host", "127.0.0.1", "--port",
         str(port), "--num-threads", "2", "--dtype", "float32", "--api-key", API_KEY],
        stdout=log, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("furlong serve exited early:\n" + open(log.name).read())
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("furlong serve did not answer /health within 120 s")


def stop_server():
    if SERVER is None:
        return
    proc = SERVER[0]
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def http(path, body=None, expect=200):
    """POST `body` (GET when None) to the server; returns (status, parsed JSON)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(SERVER[1] + path, data=data, method="GET" if body is None else "POST")
    req.add_header("Authorization", "Bearer " + API_KEY)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    reply = json.loads(text)
    if expect is not None:
        assert status == expect, "%s -> %d: %s" % (path, status, text[:500])
    return status, reply


def generate(input_ids, sampling, **extra):
    body = {"input_ids": input_ids, "sampling_params": sampling, **extra}
    return http("/generate", body)[1]


def client():
    return openai.OpenAI(base_url=SERVER[1] + "/v1", api_key=API_KEY, timeout=120, max_retries=0)


GREEDY = {"temperature": 0}
NO_EOS = {"ignore_eos": True}


class OpenAiCompletions(unittest.TestCase):
    def test_plain_completion_has_openai_shape(self):
        r = client().completions.create(model="m", prompt="Hello there", max_tokens=6, temperature=0,
                                        extra_body=NO_EOS)
        self.assertTrue(r.id.startswith("cmpl-"))
        self.assertEqual(r.object, "text_completion")
        self.assertIsInstance(r.created, int)
        self.assertIsInstance(r.model, str)
        self.assertIsNone(r.system_fingerprint)
        self.assertEqual(len(r.choices), 1)
        self.assertEqual(r.choices[0].index, 0)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 6)
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 6)

    def test_stream_concatenates_to_the_plain_text_with_usage(self):
        kw = dict(model="m", prompt="Once upon a time", max_tokens=20, temperature=0.9, seed=7,
                  extra_body=NO_EOS)
        plain = client().completions.create(**kw)
        chunks = list(client().completions.create(stream=True, stream_options={"include_usage": True},
                                                  **kw))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        self.assertEqual(text, plain.choices[0].text)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, ["length"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, plain.usage.completion_tokens)
        self.assertEqual(chunks[-1].usage.prompt_tokens, plain.usage.prompt_tokens)
        self.assertTrue(all(c.id == chunks[0].id for c in chunks))

    def test_stream_with_a_stop_string_matches_the_plain_text(self):
        base = client().completions.create(model="m", prompt="abc", max_tokens=16, temperature=0,
                                           extra_body=NO_EOS).choices[0].text
        stop = base[len(base) // 2:len(base) // 2 + 2]
        if not stop.strip():
            self.skipTest("no usable stop string in %r" % base)
        kw = dict(model="m", prompt="abc", max_tokens=16, temperature=0, stop=stop, extra_body=NO_EOS)
        plain = client().completions.create(**kw)
        streamed = "".join(c.choices[0].text for c in client().completions.create(stream=True, **kw)
                           if c.choices)
        self.assertEqual(plain.choices[0].text, base[:base.find(stop)])
        self.assertEqual(plain.choices[0].finish_reason, "stop")
        self.assertEqual(streamed, plain.choices[0].text)

    def test_stop_as_a_list(self):
        base = client().completions.create(model="m", prompt="xyz", max_tokens=12, temperature=0,
                                           extra_body=NO_EOS).choices[0].text
        stop = base[3:5]
        if not stop.strip():
            self.skipTest("no usable stop string in %r" % base)
        r = client().completions.create(model="m", prompt="xyz", max_tokens=12, temperature=0,
                                        stop=["\u2603never", stop], extra_body=NO_EOS)
        self.assertEqual(r.choices[0].text, base[:base.find(stop)])

    def test_n_gives_distinct_indices_and_summed_usage(self):
        r = client().completions.create(model="m", prompt="Count:", max_tokens=5, n=3, seed=3,
                                        temperature=1.0, extra_body=NO_EOS)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        self.assertEqual(r.usage.completion_tokens, 15)
        texts = {c.text for c in r.choices}
        self.assertGreater(len(texts), 1, "n samples with one seed must not be copies")

    def test_seed_reproduces(self):
        kw = dict(model="m", prompt="Seeded", max_tokens=10, temperature=1.0, seed=1234,
                  extra_body=NO_EOS)
        self.assertEqual(client().completions.create(**kw).choices[0].text,
                         client().completions.create(**kw).choices[0].text)

    def test_batched_prompts_strings_and_token_ids(self):
        r = client().completions.create(model="m", prompt=["first", "a second prompt"], n=2,
                                        max_tokens=3, temperature=0, extra_body=NO_EOS)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2, 3])
        self.assertEqual(r.choices[0].text, r.choices[1].text)  # greedy: same prompt, same text
        ids = [[1, 2, 3], [4, 5]]
        r = client().completions.create(model="m", prompt=ids, max_tokens=4, temperature=0,
                                        extra_body=NO_EOS)
        self.assertEqual(len(r.choices), 2)
        self.assertEqual(r.usage.prompt_tokens, 5)
        for choice, prompt in zip(r.choices, ids):
            expected = generate(prompt, {"max_new_tokens": 4, **GREEDY, **NO_EOS})["text"]
            self.assertEqual(choice.text, expected)

    def test_logprobs_match_generate_and_top_is_sorted(self):
        prompt = [11, 12, 13, 14]
        r = client().completions.create(model="m", prompt=prompt, max_tokens=6, temperature=0,
                                        logprobs=3, extra_body=NO_EOS)
        lp = r.choices[0].logprobs
        native = generate(prompt, {"max_new_tokens": 6, **GREEDY, **NO_EOS}, return_logprob=True)
        expected = [e[0] for e in native["meta_info"]["output_token_logprobs"]]
        self.assertEqual(lp.token_logprobs, expected)
        self.assertEqual(len(lp.tokens), 6)
        self.assertEqual(len(lp.text_offset), 6)
        for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            values = list(top.values())  # a dict keyed by token text: no order to check
            self.assertLessEqual(len(values), 3)
            self.assertIn(token, top)  # greedy: the chosen token is the best one
            self.assertAlmostEqual(top[token], value, places=5)
            self.assertAlmostEqual(max(values), value, places=5)

    def test_echo_prepends_the_prompt_and_scores_it(self):
        r = client().completions.create(model="m", prompt="Echo me", max_tokens=3, temperature=0,
                                        echo=True, extra_body=NO_EOS)
        self.assertTrue(r.choices[0].text.startswith("Echo me"))
        r = client().completions.create(model="m", prompt="Echo me", max_tokens=3, temperature=0,
                                        echo=True, logprobs=2, extra_body=NO_EOS)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), r.usage.prompt_tokens + 3)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertTrue(all(isinstance(v, float) for v in lp.token_logprobs[1:]))
        self.assertEqual(len(lp.top_logprobs[1]), 2)

    def test_standard_fields_at_honoured_values_are_accepted(self):
        r = client().completions.create(model="m", prompt="ok", max_tokens=2, frequency_penalty=0,
                                        presence_penalty=0, user="someone", logit_bias={},
                                        stream=False, best_of=1, suffix=None, extra_body=NO_EOS)
        self.assertEqual(r.usage.completion_tokens, 2)

    def test_unhonoured_values_are_400s_naming_the_field(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client().completions.create(model="m", prompt="x", max_tokens=2, logit_bias={"5": 10})
        self.assertIn("logit_bias", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            client().completions.create(model="m", prompt="x", max_tokens=2, suffix="tail")
        self.assertIn("suffix", str(e.exception))


def say(text):
    return [{"role": "user", "content": text}]


class OpenAiChat(unittest.TestCase):
    def test_chat_has_openai_shape(self):
        r = client().chat.completions.create(model="m", messages=say("Hi"), max_tokens=4,
                                             temperature=0, extra_body=NO_EOS)
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIsInstance(r.choices[0].message.content, str)
        self.assertEqual(r.usage.completion_tokens, 4)

    def test_max_completion_tokens(self):
        r = client().chat.completions.create(model="m", messages=say("Hi"), max_completion_tokens=5,
                                             temperature=0, extra_body=NO_EOS)
        self.assertEqual(r.usage.completion_tokens, 5)
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_stream_concatenates_to_the_plain_message(self):
        kw = dict(model="m", messages=say("Tell me"), max_tokens=15, temperature=0.8, seed=11,
                  extra_body=NO_EOS)
        plain = client().chat.completions.create(**kw)
        chunks = list(client().chat.completions.create(stream=True,
                                                       stream_options={"include_usage": True}, **kw))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, plain.choices[0].message.content)
        self.assertEqual(chunks[-1].usage.completion_tokens, 15)
        self.assertEqual(chunks[-1].object, "chat.completion.chunk")

    def test_n_and_content_parts(self):
        r = client().chat.completions.create(model="m", messages=say("a b"), max_tokens=4, n=3,
                                             temperature=1.0, seed=5, extra_body=NO_EOS)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        parts = [{"role": "user", "content": [{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]}]
        p = client().chat.completions.create(model="m", messages=parts, max_tokens=4, temperature=0,
                                             extra_body=NO_EOS)
        s = client().chat.completions.create(model="m", messages=say("a b"), max_tokens=4,
                                             temperature=0, extra_body=NO_EOS)
        self.assertEqual(p.choices[0].message.content, s.choices[0].message.content)
        self.assertEqual(p.usage.prompt_tokens, s.usage.prompt_tokens)

    def test_logprobs_and_top_logprobs(self):
        r = client().chat.completions.create(model="m", messages=say("Go"), max_tokens=5,
                                             temperature=0, logprobs=True, top_logprobs=3,
                                             extra_body=NO_EOS)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 5)
        for entry in content:
            values = [t.logprob for t in entry.top_logprobs]
            self.assertEqual(len(values), 3)
            self.assertEqual(values, sorted(values, reverse=True))
            self.assertEqual(entry.top_logprobs[0].token, entry.token)
            self.assertAlmostEqual(values[0], entry.logprob, places=5)
            self.assertEqual(bytes(entry.bytes).decode("utf-8", "replace"), entry.token)

    def test_standard_fields_accepted(self):
        r = client().chat.completions.create(model="m", messages=say("x"), max_tokens=2,
                                             frequency_penalty=0, presence_penalty=0,
                                             response_format={"type": "text"}, user="u",
                                             logit_bias={}, stream=False, extra_body=NO_EOS)
        self.assertEqual(r.usage.completion_tokens, 2)

    def test_unhonoured_values_are_400s_naming_the_field(self):
        cases = [
            (dict(response_format={"type": "json_schema",
                                   "json_schema": {"name": "x", "schema": {"type": "object"}}}),
             "response_format"),
            (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]),
             "tools"),
            (dict(messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}}]}]),
             "content[0].type"),
        ]
        for extra, needle in cases:
            kw = dict(model="m", messages=say("x"), max_tokens=2)
            kw.update(extra)
            with self.assertRaises(openai.BadRequestError) as e:
                client().chat.completions.create(**kw)
            self.assertIn(needle, str(e.exception))


class SglangNative(unittest.TestCase):
    def test_n_in_sampling_params_is_prompt_major(self):
        prompts = [[1, 2, 3], [7, 8]]
        sp = {"max_new_tokens": 4, "temperature": 1.0, "n": 2, "sampling_seed": 40, **NO_EOS}
        out = http("/generate", {"input_ids": prompts, "sampling_params": sp})[1]
        self.assertEqual([o["meta_info"]["prompt_tokens"] for o in out], [3, 3, 2, 2])
        for k, o in enumerate(out):
            single = dict(sp, n=1, sampling_seed=40 + k % 2)
            self.assertEqual(o["output_ids"], generate(prompts[k // 2], single)["output_ids"])
        one = http("/generate", {"input_ids": [5, 6], "sampling_params": dict(sp, n=3)})[1]
        self.assertEqual(len(one), 3)

    def test_min_new_tokens_masks_stop_ids(self):
        first = generate([3, 4, 5], {"max_new_tokens": 1, **GREEDY})["output_ids"][0]
        sp = {"max_new_tokens": 6, "stop_token_ids": [first], **GREEDY}
        self.assertEqual(len(generate([3, 4, 5], sp)["output_ids"]), 1)
        out = generate([3, 4, 5], dict(sp, min_new_tokens=3))["output_ids"]
        self.assertGreaterEqual(len(out), 3)
        self.assertNotIn(first, out[:3])

    def test_default_penalties_change_nothing_and_ranges_are_checked(self):
        sp = {"max_new_tokens": 8, "temperature": 0.7, "sampling_seed": 9, **NO_EOS}
        a = generate([9, 10, 11], sp, return_logprob=True)
        b = generate([9, 10, 11], dict(sp, frequency_penalty=0.0, presence_penalty=0.0,
                                       repetition_penalty=1.0, min_new_tokens=0),
                     return_logprob=True)
        self.assertEqual(a["output_ids"], b["output_ids"])
        self.assertEqual(a["meta_info"]["output_token_logprobs"],
                         b["meta_info"]["output_token_logprobs"])
        for field, value in [("repetition_penalty", 0.0), ("repetition_penalty", 2.5),
                             ("frequency_penalty", -2.5), ("presence_penalty", 3),
                             ("min_new_tokens", 99)]:
            status, reply = http("/generate", {"input_ids": [1], "sampling_params":
                                               {"max_new_tokens": 4, field: value}}, expect=None)
            self.assertEqual(status, 400, (field, value))
            self.assertIn(field, reply["error"]["message"])

    def test_penalties_lower_seen_tokens_before_sampling(self):
        # Every penalty lowers the logits of tokens already generated. While greedy picks a
        # token not seen before, it stays the argmax, so the tokens are the same and its
        # log-prob can only rise (the competing seen tokens lost mass); the first step has
        # nothing to penalize.
        sp = {"max_new_tokens": 12, **GREEDY, **NO_EOS}
        plain = generate([20, 21], sp, return_logprob=True)["meta_info"]["output_token_logprobs"]
        for extra in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0},
                      {"repetition_penalty": 2.0}):
            pen = generate([20, 21], dict(sp, **extra),
                           return_logprob=True)["meta_info"]["output_token_logprobs"]
            self.assertEqual(pen[0][1], plain[0][1], extra)
            self.assertAlmostEqual(pen[0][0], plain[0][0], places=5)
            rose = 0
            for k in range(1, len(plain)):
                seen = [t[1] for t in plain[:k]]
                if pen[k - 1][1] != plain[k - 1][1] or plain[k][1] in seen:
                    break
                self.assertEqual(pen[k][1], plain[k][1], (extra, k))
                self.assertGreaterEqual(pen[k][0], plain[k][0] - 1e-6, (extra, k))
                rose += pen[k][0] > plain[k][0] + 1e-5
            self.assertGreater(rose, 0, extra)

    def test_input_and_top_logprobs(self):
        prompt = [30, 31, 32, 33, 34]
        out = generate(prompt, {"max_new_tokens": 4, **GREEDY, **NO_EOS}, return_logprob=True,
                       logprob_start_len=0, top_logprobs_num=3, return_text_in_logprobs=True)
        meta = out["meta_info"]
        inputs = meta["input_token_logprobs"]
        self.assertEqual([e[1] for e in inputs], prompt)
        self.assertIsNone(inputs[0][0])
        self.assertTrue(all(isinstance(e[0], float) and isinstance(e[2], str) for e in inputs[1:]))
        self.assertIsNone(meta["input_top_logprobs"][0])
        self.assertEqual(len(meta["input_top_logprobs"]), len(prompt))
        for chosen, top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
            self.assertEqual(len(top), 3)
            self.assertEqual(top[0][1], chosen[1])
            self.assertEqual([t[0] for t in top], sorted((t[0] for t in top), reverse=True))
        # Scoring prompt + output gives the output tokens' log-probs back.
        full = prompt + out["output_ids"]
        scored = generate(full, {"max_new_tokens": 1, **GREEDY}, return_logprob=True,
                          logprob_start_len=len(prompt))["meta_info"]["input_token_logprobs"]
        for s, o in zip(scored, meta["output_token_logprobs"]):
            self.assertEqual(s[1], o[1])
            self.assertAlmostEqual(s[0], o[0], places=4)
        # The default (-1) scores no prompt token.
        plain = generate(prompt, {"max_new_tokens": 1}, return_logprob=True)
        self.assertEqual(plain["meta_info"]["input_token_logprobs"], [])

    def test_tokenize_and_detokenize(self):
        text = "Hello, world! 123"
        tok = http("/tokenize", {"prompt": text, "add_special_tokens": False})[1]
        self.assertEqual(tok["count"], len(tok["tokens"]))
        self.assertGreater(tok["max_model_len"], 0)
        self.assertEqual(http("/detokenize", {"tokens": tok["tokens"]})[1]["text"], text)
        batch = http("/tokenize", {"prompt": [text, "b"]})[1]
        self.assertEqual(batch["tokens"][0], tok["tokens"])
        self.assertEqual(len(batch["count"]), 2)
        texts = http("/detokenize", {"tokens": batch["tokens"]})[1]["text"]
        self.assertEqual(texts, [text, "b"])
        status, reply = http("/detokenize", {"tokens": [10 ** 9]}, expect=None)
        self.assertEqual(status, 400)
        self.assertIn("tokens[0]", reply["error"]["message"])

    def test_weight_version_is_a_string(self):
        version = http("/get_weight_version")[1]["weight_version"]
        self.assertIsInstance(version, str)
        out = generate([1, 2], {"max_new_tokens": 1})
        self.assertEqual(out["meta_info"]["weight_version"], version)
        self.assertIsInstance(http("/get_model_info")[1]["weight_version"], str)

    def test_release_then_resume_generates_again(self):
        sp = {"max_new_tokens": 6, **GREEDY, **NO_EOS}
        before = generate([40, 41, 42], sp, return_logprob=True)
        digest = http("/get_weights_digest")[1]["digest"]
        self.assertTrue(http("/release_memory_occupation", {})[1]["success"])
        self.assertTrue(http("/resume_memory_occupation", {})[1]["success"])
        after = generate([40, 41, 42], sp, return_logprob=True)
        self.assertEqual(after["output_ids"], before["output_ids"])
        self.assertEqual(after["meta_info"]["output_token_logprobs"],
                         before["meta_info"]["output_token_logprobs"])
        self.assertEqual(http("/get_weights_digest")[1]["digest"], digest)

    def test_update_weights_from_disk(self):
        sp = {"max_new_tokens": 6, **GREEDY, **NO_EOS}
        digest = http("/get_weights_digest")[1]["digest"]
        before = generate([50, 51], sp, return_logprob=True)
        # A bad path and mismatched shapes fail clearly and change nothing.
        status, reply = http("/update_weights_from_disk",
                             {"model_path": os.path.join(ARGS.workdir, "missing")}, expect=None)
        self.assertEqual(status, 400)
        self.assertFalse(reply["success"])
        self.assertIn("missing", reply["message"])
        status, reply = http("/update_weights_from_disk", {"model_path": ARGS.wide_model},
                             expect=None)
        self.assertEqual(status, 400)
        self.assertFalse(reply["success"])
        self.assertIn("shape", reply["message"])
        self.assertEqual(http("/get_weights_digest")[1]["digest"], digest)
        # Another model of the same architecture is served after the update.
        reply = http("/update_weights_from_disk", {"model_path": ARGS.other_model,
                                                   "weight_version": "7"})[1]
        self.assertTrue(reply["success"])
        self.assertEqual(http("/get_weight_version")[1]["weight_version"], "7")
        self.assertNotEqual(http("/get_weights_digest")[1]["digest"], digest)
        changed = generate([50, 51], sp, return_logprob=True)
        self.assertEqual(changed["meta_info"]["weight_version"], "7")
        self.assertNotEqual(changed["meta_info"]["output_token_logprobs"],
                            before["meta_info"]["output_token_logprobs"])
        # And back: the original weights give the original output.
        http("/update_weights_from_disk", {"model_path": ARGS.model, "load_format": "auto",
                                           "weight_version": "default"})
        self.assertEqual(http("/get_weights_digest")[1]["digest"], digest)
        self.assertEqual(generate([50, 51], sp)["output_ids"], before["output_ids"])


def main():
    global ARGS, SERVER
    parser = argparse.ArgumentParser()
    parser.add_argument("--furlong", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--workdir", required=True)
    ARGS, rest = parser.parse_known_args()
    shutil.rmtree(ARGS.workdir, ignore_errors=True)
    os.makedirs(ARGS.workdir)
    ARGS.model = init_model("model", 11)
    ARGS.other_model = init_model("other", 12)
    ARGS.wide_model = init_model("wide", 13, hidden=96)
    try:
        SERVER = start_server(ARGS.model)
        result = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result
    finally:
        stop_server()
    if not result.wasSuccessful():
        print(open(os.path.join(ARGS.workdir, "serve.log")).read()[-4000:])
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
