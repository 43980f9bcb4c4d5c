"""Oracle for furlong's text rewards and prompt shuffling (tests/reward, tests/data).

Usage: reward_text_oracle.py <cases.json> <out.json>

cases.json: {"f1": [[prediction, truth], ...], "shuffle": [[n, seed], ...]}
out.json:   {"f1": [[f1, exact_match], ...], "shuffle": [[permutation], ...]}

The F1 / exact-match scorer is SQuAD's definition (lowercase, drop punctuation, drop the
articles a/an/the, collapse whitespace; multiset token overlap), plus the yes/no/noanswer rule
miles applies. The shuffle is Python's own random.shuffle after random.seed(seed), which is what
miles does to its prompt dataset each epoch.
"""

import collections
import json
import random
import re
import string
import sys


def normalize(text):
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1(prediction, truth):
    p, t = normalize(prediction), normalize(truth)
    special = ("yes", "no", "noanswer")
    if (p in special or t in special) and p != t:
        return 0.0
    p_tokens, t_tokens = p.split(), t.split()
    same = sum((collections.Counter(p_tokens) & collections.Counter(t_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p_tokens), same / len(t_tokens)
    return 2 * precision * recall / (precision + recall)


def main():
    cases = json.load(open(sys.argv[1]))
    out = {"f1": [], "shuffle": []}
    for prediction, truth in cases.get("f1", []):
        out["f1"].append([f1(prediction, truth), float(normalize(prediction) == normalize(truth))])
    for n, seed in cases.get("shuffle", []):
        random.seed(seed)
        order = list(range(n))
        random.shuffle(order)
        out["shuffle"].append(order)
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
