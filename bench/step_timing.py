"""The loss and the timing loop every training-step benchmark shares
(train_step.py, train_step_ranks.py and torchax_llama.py, which runs in a
process without torchtpu): torch only, so that any of them can import it."""
import time

import torch.nn.functional as F


def loss_of(model, tokens):
    """Next-token cross-entropy of `model` on a [batch, seq + 1] batch."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def time_steps(step, warmup, steps):
    """Seconds per step (median of `steps` after `warmup`) and the last loss."""
    for _ in range(warmup):
        loss = step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], loss
