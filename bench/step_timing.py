"""The loss and the timing loops every training-step benchmark shares
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
        step()
    return time_interleaved({"step": step}, steps)["step"]


def time_interleaved(steps_by_key, steps):
    """{key: (seconds per step, last loss)} of already warmed-up step
    functions, timed in `steps` rounds that run one step of each in turn; each
    figure is the median of its path's rounds. On a shared, noisy host the
    speed drifts by 10-30% within a minute: timing the paths one after another
    would compare them at different speeds, while each round here sees them
    all at (nearly) the same one, so their ratios hold."""
    times = {key: [] for key in steps_by_key}
    losses = {}
    for _ in range(steps):
        for key, step in steps_by_key.items():
            t0 = time.perf_counter()
            losses[key] = step()
            times[key].append(time.perf_counter() - t0)
    return {key: (sorted(t)[len(t) // 2], losses[key]) for key, t in times.items()}
