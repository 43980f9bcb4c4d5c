#!/usr/bin/env python3
"""Oracle for furlong's tokenizer tests: expected ids and decodes from HF `tokenizers`.

Usage: tokenizer_cases.py --tokenizers DIR --out-dir DIR [--random-count N]

For the real tokenizers in DIR/<name>/tokenizer.json (qwen3, llama3) and for small synthetic
tokenizer.json files written here (covering options the real files do not use: ByteLevel with
the GPT-2 regex and add_prefix_space, added-token lstrip/rstrip/single_word/normalized,
TemplateProcessing / Roberta / Bert / Sequence post-processors, Split behaviors, NFD/NFKC,
merges as strings, no decoder, raw-character BPE with byte_fallback and a fused unk), it
encodes a fixed corpus plus seeded random Unicode strings with and without add_special_tokens,
decodes the ids back, and decodes random id sequences (some splitting UTF-8 characters), with
and without skip_special_tokens. Also splits probe texts with Split pre-tokenizers whose regexes
use Oniguruma features (\s, \h, \w, (?m), anchors). Writes DIR/cases.json:

  {"tokenizers": [{"name", "path" (absolute, or relative to DIR), "vocab_size",
                   "cases": [{"text", "ids", "ids_special", "decoded", "decoded_skip"}],
                   "decodes": [{"ids", "text", "text_skip"}]}],
   "regex_probes": [{"pattern", "text", "pieces"}]}
"""
import argparse
import json
import os
import random
import unicodedata

from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

SEED = 20240611

ENGLISH = (
    "The quick brown fox jumps over the lazy dog. It's a truth universally acknowledged, that a "
    "single man in possession of a good fortune, must be in want of a wife. However little known "
    "the feelings or views of such a man may be on his first entering a neighbourhood, this truth "
    "is so well fixed in the minds of the surrounding families."
)

CODE = (
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"
    "\n\nint main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) "
    "x *= 2;  // double\n\treturn 0;\n}\n"
    "    \t  \n  x = {'a': [1,2,3], \"b\": None}  # comment\r\n"
)

FIXED = [
    "",
    " ",
    "  ",
    "hello world",
    "Hello World!",
    " leading space",
    "trailing space ",
    "multiple   spaces   between     words",
    "tabs\tand\t\ttabs",
    "line1\nline2\r\nline3\rline4",
    "\n\n\n",
    " \n \n ",
    "   \n\n   x",
    "a" + " " * 40 + "b",
    " " * 100,
    "\t" * 7 + "x",
    "end with newline\n",
    "spaces then digits    123",
    "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "call 555-0123 or +1 (800) 555 0199, order #12345678901234567890",
    "I'm you're we've they'll she'd it's don't",
    "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T",
    "i'M yOu'Re We'vE tHeY'lL sHe'D iT'S",
    "'s 't 're 've 'm 'll 'd 'x 'S 'T",
    "long s: it'\u017f and kelvin \u212a",
    ENGLISH,
    CODE,
    "中文分词测试：今天天气很好，我们去公园散步吧。",
    "日本語のテキストです。カタカナとひらがな、漢字。",
    "한국어 텍스트입니다. 안녕하세요!",
    "混合 text with 中文 and English123数字456",
    "emoji: 😀 😃 😄 🎉 🚀 ❤️ 👍",
    "skin tones: 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 👋🏽",
    "zwj: 👨‍👩‍👧‍👦 👩‍💻 🏳️‍🌈 🧑🏽‍🚀",
    "flags: 🇺🇸 🇯🇵 🇩🇪 keycap: 1️⃣ #️⃣",
    "Arabic: مرحبا بالعالم، هذا اختبار. ١٢٣٤٥",
    "Hindi: नमस्ते दुनिया, यह एक परीक्षण है। १२३४",
    "Thai: สวัสดีครับ Hebrew: שלום עולם",
    "Greek: Καλημέρα κόσμε Cyrillic: Привет, мир!",
    "decomposed: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 A\u030a",
    "Cafe\u0301 re\u0301sume\u0301 nai\u0308ve",
    "stacked: a\u0301\u0302\u0303 q\u0307\u0323 \u1e0b\u0323",
    "hangul jamo: \u1100\u1161\u11a8 \u1112\u1161\u11ab",
    "precomposed: é à ö ñ ç Å 각 한",
    "vietnamese: Tiếng Việt có dấu: ệ ở ữ",
    "combining alone: \u0301\u0301 x\u20dd",
    "nbsp:\u00a0x ideographic:\u3000y nel:\u0085z ls:\u2028w ps:\u2029v mvs:\u180eu",
    "thin\u2009space en\u2002em\u2003 zero\u200bwidth",
    "fullwidth: ＡＢＣ１２３ ligature: ﬁ ﬀ ﬅ",
    "math: ∑ ∫ √ ∞ ≠ ≤ ≥ ∂ ∇ x² x₁ ½",
    "currency: $100 €50 ¥1000 £20 ₹500",
    "punctuation!!! ??? ... --- ___ *** ### @@@ ~~~",
    "quotes: «guillemets» „German“ ‘single’ “double”",
    "url: https://example.com/path?query=1&x=y#frag",
    "email: someone@example.org, path: C:\\Users\\x\\file.txt",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|><|endoftext|>",
    "<think>\n\n</think>\n\nanswer",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "partial <|im_start and <|im_end| and <|endoftext",
    "x<|im_start|>y<|im_end|>z<|endoftext|><|endoftext|>",
    "<s>tok</s> <sw> a<sw>b <sw>. <l> x  <l>  <r>  y",
    "word<sw>word <sw> sw <sw>",
    "  <l>  <r>  <lr>  <l><r>",
    "Café <nrm> cafe\u0301 <nrm>",
    "abc-def--ghi---jkl 12-34",
    "\u00a0\u00a0 leading nbsp",
    "mixed\u3000ideographic\u3000spaces",
    "marks newer than Unicode 9: \ua8e3\U0001193e\U0001f619 \u0301\u0d3b \U00011935\U00011930",
]

# Long runs: one huge pre-token (the BPE merge loop at scale), long whitespace lookaheads.
LONG = [" " * 5000, "a" * 5000, "1" * 3001, "\n" * 3000, "ab " * 2000, "\t \n" * 1000,
        "\u4e2d" * 2000, "\U0001f600" * 1000, "x" + " " * 3000 + "1", "nul\x00byte\x00",
        "ThisIsOneVeryLongIdentifierWithoutSpaces" * 100]

# Code point ranges for random strings: assigned, long-stable blocks of many scripts, plus
# whitespace, combining marks, digits and emoji.
RANGES = [
    (0x20, 0x7E, 30), (0x09, 0x0D, 4), (0xA0, 0xFF, 6), (0x100, 0x24F, 4), (0x300, 0x36F, 5),
    (0x370, 0x3FF, 3), (0x400, 0x4FF, 3), (0x590, 0x5FF, 2), (0x600, 0x6FF, 4),
    (0x900, 0x97F, 4), (0xE00, 0xE7F, 2), (0x1100, 0x11FF, 2), (0x2000, 0x206F, 4),
    (0x20A0, 0x20BF, 1), (0x2190, 0x21FF, 1), (0x2200, 0x22FF, 1), (0x3000, 0x303F, 2),
    (0x3040, 0x30FF, 4), (0x4E00, 0x9FFF, 8), (0xAC00, 0xD7A3, 4), (0xFF00, 0xFFEF, 2),
    (0x1F300, 0x1F5FF, 4), (0x1F600, 0x1F64F, 4), (0x1F3FB, 0x1F3FF, 2), (0x200D, 0x200D, 2),
    (0xFE0F, 0xFE0F, 1), (0x0660, 0x0669, 1), (0x0966, 0x096F, 1), (0x30, 0x39, 6),
]


# A small alphabet dense in the pre-tokenizer regexes' edge cases (whitespace kinds, contractions,
# digits of other scripts, marks, joiners).
TRICKY = [" ", " ", "\t", "\n", "\r", "\x0b", "\x0c", "\u00a0", "\u3000", "\u2028", "\u0085",
          "\u180e", "\u200b", "a", "Z", "1", "7", "\u0663", "'", "s", "S", "\u017f", "t", "LL", "!",
          ".", "_", "\u0301", "\u4e2d", "\U0001f600", "\u200d", "\ufe0f", "\U0001f3fd", "-", "\u00e9"]


def random_char(rng, anywhere=False):
    if anywhere:  # any assigned code point (Python's Unicode data), BMP and SMP
        while True:
            c = chr(rng.randint(0x20, 0x1FFFF))
            if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
                return c
    total = sum(w for _, _, w in RANGES)
    while True:
        r = rng.uniform(0, total)
        for lo, hi, w in RANGES:
            if r < w:
                break
            r -= w
        c = chr(rng.randint(lo, hi))
        if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
            return c


def random_texts(rng, count):
    texts = []
    for i in range(count):
        anywhere = i % 5 == 4
        n = rng.randint(1, 60)
        parts = []
        if i % 5 == 3:
            texts.append("".join(rng.choice(TRICKY) for _ in range(n)))
            continue
        for _ in range(n):
            roll = rng.random()
            if roll < 0.08:
                parts.append(rng.choice(["'s", "'LL", "'Re", " ", "  ", "\n", "\r\n", "<|im_end|>",
                                         "<|end_of_text|>", "<sw>", "<l>", "<r>", "<nrm>", "-"]))
            else:
                parts.append(random_char(rng, anywhere))
        texts.append("".join(parts))
    return texts


def random_id_sequences(rng, tok, texts, count):
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    seqs = []
    for i in range(count):
        if i % 2 == 0:
            seqs.append([rng.randrange(vocab_size) for _ in range(rng.randint(1, 12))])
        else:  # a slice of a real encoding: often cuts a multi-byte character
            ids = tok.encode(rng.choice(texts)).ids
            if not ids:
                continue
            a = rng.randrange(len(ids))
            b = rng.randint(a + 1, min(len(ids), a + 6))
            seqs.append(ids[a:b])
    return seqs


def cases_for(name, path, texts, rng):
    tok = Tokenizer.from_file(path)
    cases = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({
            "text": text,
            "ids": ids,
            "ids_special": tok.encode(text, add_special_tokens=True).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip": tok.decode(ids, skip_special_tokens=True),
        })
    decodes = []
    for ids in random_id_sequences(rng, tok, texts, 300):
        decodes.append({
            "ids": ids,
            "text": tok.decode(ids, skip_special_tokens=False),
            "text_skip": tok.decode(ids, skip_special_tokens=True),
        })
    return {"name": name, "path": path, "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "cases": cases, "decodes": decodes}


def train_base(corpus):
    """A small byte-level BPE (vocab ~600) trained on the corpus, as a tokenizer.json dict."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus * 3, trainer=trainer)
    return json.loads(tok.to_str())


def added(tid, content, special=False, **flags):
    entry = {"id": tid, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": special}
    entry.update(flags)
    return entry


def synthetic_variants(base):
    """Small tokenizer.json dicts exercising options the real files do not use."""
    n = len(base["model"]["vocab"])
    tokens = [
        added(n, "<s>", special=True), added(n + 1, "</s>", special=True),
        added(n + 2, "<sw>", single_word=True), added(n + 3, "<l>", lstrip=True),
        added(n + 4, "<r>", rstrip=True), added(n + 5, "<lr>", lstrip=True, rstrip=True),
        added(n + 6, "<nrm>", normalized=True), added(n + 7, "Café", normalized=True),
        added(n + 8, "<|im_end|>", special=True),
    ]
    merges_as_strings = [" ".join(m) if isinstance(m, list) else m for m in base["model"]["merges"]]
    template = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [n], "tokens": ["<s>"]},
                           "</s>": {"id": "</s>", "ids": [n + 1], "tokens": ["</s>"]}},
    }
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": False}

    gpt2 = json.loads(json.dumps(base))
    gpt2["added_tokens"] = tokens
    gpt2["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFD"}]}
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                             "use_regex": True}
    gpt2["post_processor"] = template
    gpt2["decoder"] = dict(byte_level)
    gpt2["model"]["merges"] = merges_as_strings

    splits = json.loads(json.dumps(base))
    splits["added_tokens"] = tokens
    splits["normalizer"] = {"type": "NFKC"}
    splits["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithPrevious",
         "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Contiguous",
         "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithNext",
         "invert": False},
        dict(byte_level, add_prefix_space=True)]}
    splits["post_processor"] = {"type": "Sequence", "processors": [
        dict(byte_level), {"type": "RobertaProcessing", "sep": ["</s>", n + 1], "cls": ["<s>", n],
                           "trim_offsets": True, "add_prefix_space": False}]}
    splits["decoder"] = None
    splits["model"]["ignore_merges"] = True

    removed = json.loads(json.dumps(base))
    removed["added_tokens"] = tokens
    removed["normalizer"] = {"type": "NFC"}
    removed["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "Removed", "invert": True},
        {"type": "Split", "pattern": {"Regex": "\\w+|[^\\w\\s]+"}, "behavior": "Isolated",
         "invert": False},
        dict(byte_level)]}
    removed["post_processor"] = {"type": "BertProcessing", "sep": ["</s>", n + 1],
                                 "cls": ["<s>", n]}
    removed["decoder"] = dict(byte_level)

    # No byte-level mapping: raw characters, <0xXX> byte fallback for ASCII only, and a fused
    # unk token for everything else.
    unk = json.loads(json.dumps(base))
    vocab = unk["model"]["vocab"]
    for b in range(128):
        vocab["<0x%02X>" % b] = len(vocab)
    vocab["<unk>"] = len(vocab)
    unk["added_tokens"] = [dict(t, id=t["id"] + 129) for t in tokens]
    unk["normalizer"] = None
    unk["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed",
                            "invert": False}
    unk["post_processor"] = None
    unk["decoder"] = None
    unk["model"].update({"byte_fallback": True, "unk_token": "<unk>", "fuse_unk": True})

    return {"synthetic_gpt2": gpt2, "synthetic_splits": splits, "synthetic_removed": removed,
            "synthetic_unk": unk}


# Oniguruma semantics that PCRE2 needs translating for: \s, \h, \w, (?m), line anchors, etc.
REGEX_PROBES = ["^a", "a$", ".", "\\w+", "\\h+", "\\d+", "\\W+", "(?m:.+)", "(?i)K", "\\S+",
                "\\s+(?!\\S)", "[^\\s\\p{L}]+", "\\A.", ".\\z", "\\p{Lu}", "(?i:'s|'ll)", "\\p{N}{1,3}",
                "[\\p{L}\\p{M}]+", " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"]
PROBE_TEXTS = ["a\nab_1\u0663 \u180e\u00a0x\u212a\u0301\u00e9\tZ Kk e\u0301\r\n",
               "It'S A'LL 'Ll \u017f's 12345 \u3000\u2028 x\u0085y !!\n\n  z"]


def regex_probes():
    probes = []
    for pattern in REGEX_PROBES:
        split = pre_tokenizers.Split(Regex(pattern), "isolated")
        for text in PROBE_TEXTS:
            probes.append({"pattern": pattern, "text": text,
                           "pieces": [p for p, _ in split.pre_tokenize_str(text)]})
    return probes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizers", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--random-count", type=int, default=250,
                        help="number of seeded random strings added to the corpus")
    args = parser.parse_args()
    rng = random.Random(SEED)
    texts = FIXED + LONG + random_texts(rng, args.random_count)
    os.makedirs(args.out_dir, exist_ok=True)
    results = []
    for name in ("qwen3", "llama3"):
        path = os.path.join(os.path.abspath(args.tokenizers), name, "tokenizer.json")
        results.append(cases_for(name, path, texts, rng))
    for name, spec in synthetic_variants(train_base(FIXED[:60])).items():
        path = os.path.join(os.path.abspath(args.out_dir), name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        results.append(cases_for(name, path, texts, rng))
        results[-1]["path"] = name + ".json"  # relative to the output directory
    with open(os.path.join(args.out_dir, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizers": results, "regex_probes": regex_probes()}, f, ensure_ascii=True)


if __name__ == "__main__":
    main()
