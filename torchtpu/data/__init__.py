"""The trainer's data: a byte-level tokenizer and random windows of a text
corpus (corpus.txt, shipped with the package; see make_corpus.py).

Batches are a pure function of (seed, batch index): resuming at step n reads
exactly the batches an uninterrupted run would have read, with no loader state
to save.
"""
import os

import torch

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.txt")


class ByteTokenizer:
    """Token ids 0..255 are the UTF-8 bytes; 256 is BOS, 257 is EOS."""
    BOS = 256
    EOS = 257
    vocab_size = 258

    def encode(self, text, bos=False, eos=False):
        ids = list(text.encode("utf-8"))
        return ([self.BOS] if bos else []) + ids + ([self.EOS] if eos else [])

    def decode(self, ids):
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class TextDataset:
    """A corpus as one token stream (documents are paragraphs, each framed by
    BOS ... EOS); batch(i) returns inputs and next-token targets, both
    [batch_size, seq_len] int64 on the CPU."""

    def __init__(self, path=None, seq_len=128, batch_size=8, seed=0, tokenizer=None):
        self.tokenizer = tokenizer or ByteTokenizer()
        path = path or CORPUS
        with open(path, encoding="utf-8") as f:
            text = f.read()
        ids = []
        for para in text.split("\n\n"):
            if para.strip():
                ids += self.tokenizer.encode(para.strip(), bos=True, eos=True)
        self.tokens = torch.tensor(ids, dtype=torch.int64)
        if len(self.tokens) <= seq_len + 1:
            raise ValueError(f"corpus {path}: {len(self.tokens)} tokens, too few for "
                             f"seq_len {seq_len}")
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed

    def batch(self, index):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        starts = torch.randint(0, len(self.tokens) - self.seq_len - 1, (self.batch_size,),
                               generator=g)
        rows = torch.stack([self.tokens[s:s + self.seq_len + 1] for s in starts.tolist()])
        return rows[:, :-1], rows[:, 1:]
