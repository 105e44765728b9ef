"""[profiling]: a Chrome trace of a window of training steps, as TorchTitan
does (--profiling.enable_profiling, --profiling.save_traces_folder,
--profiling.profile_freq; --profiling.enable is the same switch).

Every profile_freq steps the last profiler_active steps (after
profiler_warmup steps of warm-up) are traced; the trace goes to
job.dump_folder/save_traces_folder/iteration_N/rank{R}_trace.json, N the step
that closed the window. It is torch.profiler.profile, which on "tpu" records
ProfilerActivity.PrivateUse1 too: one device event per tpu program (op, fused
graph or compiled graph) under the ATen op that ran it, with its device time
and bytes (shim/profiler.cpp).
"""
import contextlib
import os

import torch
from torch.profiler import ProfilerActivity


class _Off:
    def step(self):
        pass


@contextlib.contextmanager
def maybe_profile(cfg, device, rank, start_step, log):
    """Yields an object whose step() the loop calls once per training step."""
    p, job = cfg["profiling"], cfg["job"]
    if not (p["enable_profiling"] or p["enable"]):
        yield _Off()
        return
    folder = os.path.join(job["dump_folder"], p["save_traces_folder"])
    active, warmup = p["profiler_active"], p["profiler_warmup"]
    wait = p["profile_freq"] - active - warmup

    saved = set()

    def on_trace_ready(prof):
        # The loop's end closes the window it opened at the last step: no
        # step ran in it, and it would overwrite the last trace.
        if prof.step_num in saved:
            return
        saved.add(prof.step_num)
        out_dir = os.path.join(folder, f"iteration_{prof.step_num}")
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"rank{rank}_trace.json")
        prof.export_chrome_trace(path)
        log(f"profiler: trace of steps {prof.step_num - active + 1}..{prof.step_num} in {path}")

    kwargs = dict(schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active),
                  on_trace_ready=on_trace_ready)
    activities = [ProfilerActivity.CPU]
    if device.type == "tpu":
        activities.append(ProfilerActivity.PrivateUse1)
    prof = torch.profiler.profile(activities=activities, **kwargs)
    prof.step_num = start_step  # a resumed run keeps the step numbers
    with prof:
        yield prof
