"""The trainer: a Llama-style (or MoE) language model on a byte-level text
corpus, on "tpu" or "cpu", configured like TorchTitan (TOML + overrides).

    python -m torchtpu.train --config torchtpu/configs/llama_debug.toml \\
        [--training.steps 300] [--model.flavor tiny] [--training.device cpu] \\
        [--checkpoint.resume]
    python -m torchtpu.train --config torchtpu/configs/llama3_70b.toml --dry-run \\
        [--parallelism.tensor_parallel_degree 8] [--tokens-per-second X | --mfu 0.4]

--dry-run builds the model on the meta device and prints parameter counts,
FLOPs per token, memory per rank for the [parallelism] degrees and MFU
figures (torchtpu/trainer/plan.py), touching no device.

Each step: gradient accumulation over micro-batches (optionally under
torch.autocast bfloat16), gradient clipping, an AdamW/Adam/SGD step and a
warmup + cosine (or linear) learning-rate schedule. Every metrics.log_freq
steps a line with loss, grad norm, tokens/s, TFLOP/s, MFU and memory.
Checkpoints are written atomically every checkpoint.interval steps and at the
end (checkpoint.async_mode = "async": on a thread while the steps go on); a
run continues from the newest complete one in its folder exactly where it
stopped (the data order is a function of the step, the random states are
saved; --checkpoint.resume false starts fresh). SIGTERM ([preemption]) stops
the run at the end of the step with a checkpoint and exit code 143, which
torchrun --max-restarts restarts on (docs/fault_tolerance.md). A loss-curve
PNG is written to job.dump_folder at the end.

train(cfg) is the same run as a function (the tests call it).
"""
import contextlib
import io
import math
import os
import pickle
import sys
import time

import torch
import torch.nn.functional as F

from .data import TextDataset
from .models import build_model, flops_per_token, num_params
from .trainer import activation_checkpoint, checkpoint, parallel
from .trainer.preemption import Preempted, Preemption
from .trainer.config import load_config
from .trainer.metrics import ProgressBar, TensorBoard, format_line, measure_peak_flops, memory
from .trainer.plot import loss_curve_png
from .trainer.profiling import maybe_profile


# --- building blocks ----------------------------------------------------------------

def build_optimizer(params, o):
    """AdamW / Adam / SGD as configured; implementation picks foreach, the
    single-tensor loop or the fused kernel."""
    impl = {"foreach": {"foreach": True}, "for-loop": {"foreach": False},
            "fused": {"fused": True}}[o["implementation"]]
    name = o["name"].lower()
    if name == "sgd":
        if "fused" in impl:
            impl = {"fused": True}
        return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"],
                               nesterov=o["nesterov"], weight_decay=o["weight_decay"], **impl)
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return cls(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
               weight_decay=o["weight_decay"], **impl)


def lr_lambda(s, total_steps):
    """Multiplier of the base lr after `step` optimizer steps: linear warmup
    to 1, then cosine (or linear) decay to min_lr_factor, or constant."""
    warmup, kind, floor = s["warmup_steps"], s["decay_type"], s["min_lr_factor"]

    def factor(step):
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        if kind == "linear":
            return floor + (1.0 - floor) * (1.0 - progress)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return factor


def rng_state(device):
    state = {"cpu": torch.get_rng_state()}
    if torch.device(device).type == "tpu":
        state["tpu"] = torch.tpu.get_rng_state()
    return state


def set_rng_state(state, device):
    torch.set_rng_state(state["cpu"].cpu())
    if "tpu" in state and torch.device(device).type == "tpu":
        torch.tpu.set_rng_state(state["tpu"].cpu())


# --- the run ------------------------------------------------------------------------

def train(cfg, log=print):
    """Runs the configured training; returns {"losses": {step: loss},
    "grad_norms": {step: norm}, "model", "optimizer", "checkpoint": path or
    None, "plot": path or None, "seconds", "step_ends": {step: perf_counter
    at the end of the step and its checkpoint}}. Preempted (SystemExit)
    when a [preemption] signal stopped it after writing its checkpoint."""
    with contextlib.ExitStack() as cleanup:  # signal handlers are restored even on errors
        if cfg["training"]["device"] != "tpu":
            return _train(cfg, log, cleanup)
        import torchtpu  # registers the device
        mode = torchtpu.fallback_mode()
        if mode == "warn":
            torchtpu.set_fallback_mode("silent")  # summarised once at the end instead
        try:
            return _train(cfg, log, cleanup)
        finally:
            torchtpu.set_fallback_mode(mode)


def _train(cfg, log, cleanup):
    t_start = time.perf_counter()
    job, m, t, ck, mt = (cfg[k] for k in ("job", "model", "training", "checkpoint", "metrics"))
    par = parallel.setup(cfg)  # torchrun: join the process group, set the device
    if not par.is_main:
        def log(*args, **kwargs):
            pass
    device = torch.device(t["device"])
    torch.manual_seed(t["seed"])

    overrides = {"dropout": m["dropout"]}
    if m["attention"] == "flash" or m["use_splash_attention_kernel"]:
        overrides["attention"] = "flash"
    elif m["attention"] != "sdpa":
        overrides["attention"] = m["attention"]  # the model names the valid ones
    if m["use_gmm_kernel"]:
        if m["name"] != "moe":
            raise ValueError("model.use_gmm_kernel needs model.name = 'moe'")
        overrides["use_gmm_kernel"] = True
    if m["vocab_size"]:
        overrides["vocab_size"] = m["vocab_size"]
    model = build_model(m["name"], m["flavor"], **overrides)  # on the CPU: same init everywhere
    # one global batch of local_batch_size x dp rows; each rank reads its slice
    data = TextDataset(t["dataset_path"] or None, t["seq_len"], t["local_batch_size"] * par.dp,
                       t["seed"])
    if data.tokenizer.vocab_size > model.args.vocab_size:
        raise ValueError(f"model vocab_size {model.args.vocab_size} < tokenizer's "
                         f"{data.tokenizer.vocab_size}")
    model.to(device)
    model.train()
    core = model  # the module itself (model may become its DDP wrapper)
    flops_tok = flops_per_token(core, t["seq_len"])
    n_params = (num_params(core), num_params(core, exclude_embedding=True))
    # [activation_checkpoint] before FSDP wraps the blocks; after TP, whose plan
    # names the blocks' submodules (TorchTitan's order: TP, AC, FSDP)
    ac = cfg["activation_checkpoint"]
    if par.tp == 1:
        activation_checkpoint.apply(core, ac)
    model = parallel.apply(model, par, device)  # DDP / FSDP2 / HSDP per [parallelism]
    if par.tp > 1:
        activation_checkpoint.apply(core, ac)
    optimizer = build_optimizer(model.parameters(), parallel.optimizer_config(cfg["optimizer"], par))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(cfg["lr_scheduler"], t["steps"]))
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16)
                if t["mixed_precision"] == "bfloat16" else contextlib.nullcontext())

    ck_folder = os.path.join(job["dump_folder"], ck["folder"])
    losses, grad_norms, start = {}, {}, 0
    if ck["enable"] and ck["resume"] and par.enabled:
        start, extra = parallel.dcp_load_latest(model, optimizer, {"blob": io.BytesIO()},
                                                ck_folder, par)
        if extra is not None:
            extra["blob"].seek(0)
            state = pickle.loads(extra["blob"].read())
            scheduler.load_state_dict(state["lr_scheduler"])
            if "rng" in state:
                set_rng_state(state["rng"], device)
            losses = dict(state.get("losses", {}))
            log(f"resumed from {ck_folder} step {start} on {par.world} ranks "
                f"(saved on {state.get('world', '?')}; --checkpoint.resume false starts fresh)")
        else:
            log(f"no checkpoint in {ck_folder}; starting from step 0")
    elif ck["enable"] and ck["resume"]:
        # Read onto the CPU: load_state_dict copies weights and moments to the
        # parameters' device and keeps Adam's step counts on the host, as in a
        # fresh run (map_location=device would put the counts on the device).
        start, state = checkpoint.load_latest(ck_folder, map_location="cpu")
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["lr_scheduler"])
            set_rng_state(state["rng"], device)
            losses = dict(state.get("losses", {}))
            log(f"resumed from {checkpoint.path_for(ck_folder, start)} (step {start}; "
                f"--checkpoint.resume false starts fresh)")
        else:
            log(f"no checkpoint in {ck_folder}; starting from step 0")

    tokens_per_step = (t["local_batch_size"] * t["seq_len"] * t["gradient_accumulation_steps"]
                       * par.dp)  # all ranks together
    precision = torch.bfloat16 if t["mixed_precision"] == "bfloat16" else torch.float32
    if mt["peak_flops"] > 0:
        peak, peak_src = mt["peak_flops"], "configured"
    else:
        peak = measure_peak_flops(device, precision)
        peak_src = f"measured peak ({str(precision)[6:]} 1024x1024 matmul on {device.type})"
    if par.enabled:
        peak = parallel.sum_across(peak, par)  # MFU against the sum of the ranks' peaks
        peak_src += f", summed over {par.world} ranks"
    log(f"model {m['name']}/{m['flavor']}: {n_params[0]:,} parameters "
        f"({n_params[1]:,} non-embedding), "
        f"{flops_tok / 1e6:.1f} MFLOP/token")
    if par.fsdp_auto:
        log("parallelism.fsdp = auto: SimpleFSDP, since training.compile_mode = 'step' traces "
            "the whole step and FSDP2's fully_shard runs its collectives in eager hooks")
    if par.enabled:
        log(f"parallelism: {par.world} ranks, data_parallel_replicate_degree {par.replicate}, "
            f"data_parallel_shard_degree {par.shard}, tensor_parallel_degree {par.tp} ("
            + _strategy(par)
            + f"), collectives {torchtpu_transport(device)}")
    log(f"device {_describe(device)}; peak {peak / 1e9:.1f} GFLOP/s, {peak_src}")
    log(f"training {t['steps']} steps of {tokens_per_step} tokens "
        f"(batch {t['local_batch_size']} x seq {t['seq_len']} x accum "
        f"{t['gradient_accumulation_steps']}), {cfg['optimizer']['name']} lr "
        f"{cfg['optimizer']['lr']}, {t['mixed_precision']}"
        + (f", activation checkpointing {ac['mode']}"
           + (f" ({ac['selective_ac_option']})" if ac["mode"] == "selective" else "")
           if ac["mode"] != "none" else ""))

    tb = TensorBoard(mt["enable_tensorboard"], os.path.join(job["dump_folder"], mt["save_tb_folder"]),
                     log)
    bar = ProgressBar(t["steps"], start, enabled=mt["progress_bar"] and par.is_main)
    if device.type == "tpu":
        torch.tpu.reset_peak_memory_stats()
    pending = {}  # step -> (loss, grad_norm) tensors not yet read back
    saved = None
    t_window, n_window = time.perf_counter(), 0
    accum = t["gradient_accumulation_steps"]
    fused = False
    if device.type == "tpu":
        import torchtpu
        fused = getattr(torchtpu, "get_mode", lambda: "strict")() == "fused"
    # --- training.compile (issue 6): torch.compile of forward+loss and optimizer step --
    def forward_loss(x, y):
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        aux = core.aux_loss()
        return loss, (loss if aux is None else loss + aux)

    optimizer_step = optimizer.step
    whole_step = None  # training.compile_mode = "step" (issue 13): the step as one program
    if t["compile"] and t["compile_mode"] == "step":
        from .trainer.graph_step import WholeStep
        whole_step = WholeStep(core, optimizer, cfg, device, par)
    elif t["compile"]:
        from .compile import compile_training
        forward_loss, optimizer_step = compile_training(forward_loss, optimizer, device)
    # --- end training.compile ----------------------------------------------------------
    compile_report = {}  # training.compile: what the steps ran and compiled (see below)
    profiling = contextlib.ExitStack()  # [profiling]: closed after the loop
    profiler = profiling.enter_context(maybe_profile(cfg, device, par.rank, start, log))
    inject = None
    if os.environ.get("TORCHTPU_FAULTS"):  # tests: torchtpu/testing/faults.py
        from .testing import faults
        inject = faults.from_env()
    in_flight = []  # an asynchronous checkpoint being written (checkpoint.async_mode)

    def write_checkpoint(step, use_async=False):
        """Saves step `step`; returns the path of the newest finished one."""
        nonlocal t_window
        if pending:
            values = _read_back(pending, par)
            losses.update({s: v[0] for s, v in values.items()})
            grad_norms.update({s: v[1] for s, v in values.items()})
            pending.clear()
        t_save = time.perf_counter()
        done = in_flight.pop().wait() if in_flight else saved  # one save at a time
        if par.enabled:
            blob = io.BytesIO(pickle.dumps({"step": step, "lr_scheduler": scheduler.state_dict(),
                                            "losses": losses, "config": cfg,
                                            "rng": rng_state(device), "world": par.world}))
            out = parallel.dcp_save(model, optimizer, {"blob": blob}, ck_folder, step,
                                    ck["keep_latest_k"], par, async_save=use_async)
        else:
            state = {"step": step, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(),
                     "lr_scheduler": scheduler.state_dict(), "rng": rng_state(device),
                     "losses": losses, "config": cfg}
            save = checkpoint.save_async if use_async else checkpoint.save
            out = save(state, ck_folder, step, ck["keep_latest_k"])
        if not isinstance(out, str):
            in_flight.append(out)
        else:
            done = out
        t_window += time.perf_counter() - t_save  # saving is not training time
        return done

    step_ends = {}  # step -> time.perf_counter() when it (and its checkpoint) ended
    preempt = Preemption(cfg["preemption"], log)
    cleanup.enter_context(preempt)  # the handlers are restored when train() returns
    stopped = None
    for step in range(start + 1, t["steps"] + 1):
        if t["compile"] and whole_step is None and step == start + 2:
            before = _compile_counters(device)
        micro_batches = [data.batch((step - 1) * accum + micro) for micro in range(accum)]
        micro_batches = [(parallel.local_rows(x, par), parallel.local_rows(y, par))
                         for x, y in micro_batches]
        if whole_step is not None:  # forward, backward, clipping and update: one program
            mean_loss, grad_norm = whole_step(torch.stack([x for x, _ in micro_batches]),
                                              torch.stack([y for _, y in micro_batches]))
            if whole_step.calls == 2:
                log(f"whole-step: {whole_step.programs_per_step} program(s) per step"
                    + (f" ({whole_step.segments} device segments around the host "
                       f"collectives)" if whole_step.segments > 1 else ""))
                why = whole_step.not_captured()
                if why:
                    log(f"whole-step: not replayed ({why})")
        else:
            loss_sum = None
            for x, y in micro_batches:
                x, y = x.to(device), y.to(device)
                with autocast:
                    loss, total = forward_loss(x, y)
                (total / accum).backward()
                loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
            if t["max_norm"] > 0:
                grad_norm = parallel.clip_grad_norm(model.parameters(), t["max_norm"], par)
            else:
                grad_norm = _grad_norm(model)
            grad_norm = parallel.full(grad_norm)  # FSDP2: a DTensor
            optimizer_step()  # optimizer.step, or its compiled graph (training.compile)
            mean_loss = loss_sum / accum
        scheduler.step()
        if whole_step is None:
            optimizer.zero_grad(set_to_none=True)
        if fused:
            torchtpu.sync()  # one step, one program (as XLA's mark_step)
        pending[step] = (mean_loss, grad_norm.detach())
        if t["compile"] and whole_step is None and step == start + 2:
            # the first step that runs what step 1 compiled
            compile_report = _report_segments(before, _compile_counters(device), log)
        n_window += 1
        bar.update()
        profiler.step()  # [profiling]: a trace when a window closes

        last = step == t["steps"]
        if step % mt["log_freq"] == 0 or last or step == start + 1:
            values = _read_back(pending, par)  # waits for the device
            losses.update({s: v[0] for s, v in values.items()})
            grad_norms.update({s: v[1] for s, v in values.items()})
            pending.clear()
            dt = time.perf_counter() - t_window
            tps = n_window * tokens_per_step / dt
            tflops = flops_tok * tps / 1e12
            mfu = 100 * flops_tok * tps / peak
            lr = float(scheduler.get_last_lr()[0])  # a tensor under training.compile
            bar.write(format_line(step, losses[step], grad_norms[step], tps, tflops, mfu,
                                  memory(device), lr))
            tb.add(step, {"loss": losses[step], "grad_norm": grad_norms[step], "tps": tps,
                          "tflops": tflops, "mfu_pct": mfu, "lr": lr})
            t_window, n_window = time.perf_counter(), 0
        if step == start + 1 and par.enabled:
            parallel.set_timeouts(cfg["comm"]["train_timeout_seconds"])  # compiling is over
        if ck["enable"] and (step % ck["interval"] == 0 or last):
            saved = write_checkpoint(step, use_async=ck["async_mode"] == "async" and not last)
        step_ends[step] = time.perf_counter()
        if inject is not None:
            inject.after_step(step, par.rank)
        if preempt.signals and parallel.stop_requested(preempt.received, par):
            stopped = step
            break
    if in_flight:
        saved = in_flight.pop().wait()
    if stopped is not None:
        # the last step's losses, then a checkpoint of it (unless the step
        # just wrote one), within the grace period
        if pending:
            values = _read_back(pending, par)
            losses.update({s: v[0] for s, v in values.items()})
            grad_norms.update({s: v[1] for s, v in values.items()})
            pending.clear()
        if ck["enable"] and (saved is None or not saved.rstrip("/").endswith(
                (f"step-{stopped}.pt", f"step-{stopped}.dcp"))):
            saved = write_checkpoint(stopped)
        profiling.close()
        bar.close()
        tb.close()
        took = preempt.seconds_since()
        log(f"preemption: {preempt.received or 'a signal on another rank'} after step "
            f"{stopped}; " + (f"checkpoint {saved}" if ck["enable"] else "checkpointing is off")
            + (f" written {took:.1f} s after the signal" if took is not None else "")
            + f"; exiting with {preempt.exit_code}")
        raise Preempted(preempt.exit_code)
    profiling.close()
    bar.close()
    tb.close()

    plot = None
    if mt["plot"] and losses and par.is_main:
        os.makedirs(job["dump_folder"], exist_ok=True)
        steps = sorted(losses)
        plot = loss_curve_png(os.path.join(job["dump_folder"], "loss.png"), steps,
                              [losses[s] for s in steps])
    seconds = time.perf_counter() - t_start
    if losses:
        first, final = losses[min(losses)], losses[max(losses)]
        log(f"done: loss {first:.4f} (step {min(losses)}) -> {final:.4f} (step {max(losses)}) "
            f"in {seconds:.1f} s" + (f"; checkpoint {saved}" if saved else "")
            + (f"; plot {plot}" if plot else ""))
    whole = None
    if whole_step is not None:
        whole = whole_step.stats()
        log(f"whole-step: {whole['compiles_after_step2']} compile(s) in the steps after step 2")
    if device.type == "tpu":
        import torchtpu
        fb = torchtpu.fallback_counts()
        if fb:
            log("ops that ran on the CPU (no tpu lowering yet): "
                + ", ".join(f"{k} x{v}" for k, v in sorted(fb.items(), key=lambda kv: -kv[1])))
    if compile_report:
        compile_report["end"] = _compile_counters(device)
    return {"losses": losses, "grad_norms": grad_norms, "model": model, "optimizer": optimizer,
            "parallel": par, "whole_step": whole, "compile": compile_report,
            "checkpoint": saved, "plot": plot, "seconds": seconds, "step_ends": step_ends}


def _compile_counters(device):
    """torchtpu.compile's counters and the core's program compiles."""
    from . import compile as tpu_compile
    out = tpu_compile.stats()
    if device.type == "tpu":
        out["programs_compiled"] = torch.tpu._get_cache_stats()["compiles"]
    return out


def _report_segments(before, after, log):
    """Logs (once) how many program segments one compiled step ran: one per
    graph, more where collectives split a graph (SimpleFSDP)."""
    d = {k: after[k] - before[k] for k in ("segment_runs", "collective_runs", "calls")}
    log(f"training.compile: {d['segment_runs']} program segments per step ({d['calls']} graphs"
        + (f", split by {d['collective_runs']} groups of host collectives" if d["collective_runs"]
           else "") + ")")
    return {"segments_per_step": d["segment_runs"], "collective_groups_per_step":
            d["collective_runs"], "graphs_per_step": d["calls"], "after_step_2": after}


def _strategy(par):
    if par.tp > 1:
        return "TP"
    if par.shard == 1:
        return "DDP"
    name = "HSDP" if par.replicate > 1 else "FSDP2"
    if par.simple:
        name = "SimpleFSDP" + (" HSDP" if par.replicate > 1 else "")
        if (par.param_dtype, par.reduce_dtype) != ("float32", "float32"):
            name += f", gather {par.param_dtype}, reduce {par.reduce_dtype}"
    return name


def _grad_norm(model):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def _read_back(pending, par=None):
    """{step: (loss, grad_norm)} as floats, in one transfer; on many ranks the
    loss is the mean over the ranks (the global batch's loss)."""
    steps = sorted(pending)
    flat = torch.stack([torch.stack((pending[s][0].float(), pending[s][1].float()))
                        for s in steps])
    if par is not None and par.enabled:
        flat = parallel.mean_across(flat, par)  # grad norms are equal on every rank
    flat = flat.cpu().tolist()
    return {s: (v[0], v[1]) for s, v in zip(steps, flat)}


def torchtpu_transport(device):
    if device.type != "tpu":
        return "gloo"
    import torchtpu
    return torchtpu.distributed.transport()


def _describe(device):
    if device.type != "tpu":
        return "cpu (PyTorch CPU)"
    import torchtpu
    info = torchtpu.runtime_info()
    return f"tpu ({info['device_kind']}, PJRT platform {info['platform']})"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return
    path, rest, i = None, [], 0
    dry, plan_args = False, {}  # --dry-run [--tokens-per-second X | --mfu U]
    while i < len(argv):
        if argv[i] in ("--dry-run", "--dry_run"):
            dry, i = True, i + 1
        elif argv[i] in ("--tokens-per-second", "--tokens_per_second", "--mfu"):
            if i + 1 >= len(argv):
                sys.exit(f"{argv[i]} needs a value")
            key = "mfu" if argv[i] == "--mfu" else "tokens_per_second"
            plan_args[key], i = float(argv[i + 1]), i + 2
        elif argv[i] == "--config":
            if i + 1 >= len(argv):
                sys.exit("--config needs a path")
            path, i = argv[i + 1], i + 2
        elif argv[i].startswith("--config="):
            path, i = argv[i].split("=", 1)[1], i + 1
        else:
            rest.append(argv[i])
            i += 1
    argv = rest
    cfg = load_config(path, argv=argv)
    if dry or plan_args:  # the meta device only: no process group, no device
        from .trainer.plan import dry_run
        dry_run(cfg, **plan_args)
        return
    import torch.distributed as dist
    try:
        train(cfg)
    except Preempted:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()  # every rank stopped at the same step
        raise
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
