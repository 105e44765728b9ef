"""Local stand-ins for the assets TorchTitan's llama3 debug config reads.

The config names its tokenizer "./tests/assets/tokenizer" and its data set
"c4_test" ("tests/assets/c4_test"), both relative to the working directory,
and both come from TorchTitan's source repository, not its wheel. There is no
network here, so `make_assets(root)` builds them under `root` from the corpus
torchtpu ships: a byte-level BPE tokenizer.json with the debug model's
2048-token vocabulary (trained with `tokenizers`, deterministic for a given
corpus) and a JSON-lines file (named as a train split) of {"text": paragraph} records that
`datasets.load_dataset(path, split="train")` reads as c4_test does.

Run as a script: `python tests/torchtitan_assets.py DIR`.
"""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "torchtpu", "data", "corpus.txt")
VOCAB_SIZE = 2048  # the llama3 debug model's vocab_size
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def _paragraphs():
    with open(CORPUS, encoding="utf-8") as f:
        return [p.strip() for p in f.read().split("\n\n") if p.strip()]


def make_assets(root):
    """Writes root/tests/assets/tokenizer and root/tests/assets/c4_test;
    returns root. Quick (well under a second) and idempotent."""
    tok_dir = os.path.join(root, "tests", "assets", "tokenizer")
    data_dir = os.path.join(root, "tests", "assets", "c4_test")
    os.makedirs(tok_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    paras = _paragraphs()

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=[BOS, EOS], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(paras, trainer=trainer)
    if tok.get_vocab_size() > VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, "
                           f"more than the model's {VOCAB_SIZE}")
    tok.save(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS,
                   "add_bos_token": True, "add_eos_token": True}, f)

    with open(os.path.join(data_dir, "c4-train.00000-of-00001.json"), "w", encoding="utf-8") as f:
        for p in paras:
            f.write(json.dumps({"text": p}) + "\n")
    return root


if __name__ == "__main__":
    print(make_assets(sys.argv[1] if len(sys.argv) > 1 else "."))
