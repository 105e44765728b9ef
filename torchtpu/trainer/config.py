"""The trainer's configuration: defaults, a TOML file on top, then command-line
overrides on top of that, in TorchTitan's style:

    python -m torchtpu.train --config torchtpu/configs/llama_debug.toml \\
        --training.steps 50 --model.flavor tiny --checkpoint.resume

Every key has a default below; a key the defaults do not know is an error (a
typo must not be silently ignored). Command-line values are parsed to the
default's type; a boolean flag without a value means true.
"""
import copy
import tomllib

DEFAULTS = {
    "job": {
        "description": "",
        "dump_folder": "./outputs",     # checkpoints, plot and TensorBoard go under it
    },
    "model": {
        "name": "llama",                # llama | moe
        "flavor": "debugmodel",
        "vocab_size": 0,                # 0: the flavour's
        "dropout": 0.0,
        "attention": "sdpa",            # sdpa | flash (Pallas kernel, torchtpu.kernels)
        "use_splash_attention_kernel": False,  # TorchTitan's TPU name: attention = flash
        "use_gmm_kernel": False,        # moe: experts through the Pallas grouped matmul
    },
    "optimizer": {
        "name": "AdamW",                # AdamW | Adam | SGD
        "lr": 8e-4,
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-8,
        "weight_decay": 0.1,
        "momentum": 0.9,                # SGD
        "nesterov": False,              # SGD
        "implementation": "foreach",    # foreach | for-loop | fused
    },
    "lr_scheduler": {
        "warmup_steps": 20,
        "decay_type": "cosine",         # cosine | linear | constant
        "min_lr_factor": 0.1,           # final lr = lr * min_lr_factor
    },
    "training": {
        "device": "tpu",                # tpu | cpu
        "steps": 300,
        "local_batch_size": 8,
        "seq_len": 128,
        "gradient_accumulation_steps": 1,
        "max_norm": 1.0,                # gradient clipping (0: off)
        "seed": 0,
        "mixed_precision": "float32",   # float32 | bfloat16 (torch.autocast)
        "dataset_path": "",             # "": the shipped corpus
        "compile": False,               # torch.compile the step (backend "tpu"; issue 6)
        "compile_mode": "graphs",       # graphs: forward+backward and optimizer graphs;
                                        # step: the whole step as one program (issue 13)
        "mixed_precision_param": "float32",   # SimpleFSDP: dtype parameters are gathered in
        "mixed_precision_reduce": "float32",  # SimpleFSDP: dtype gradients are reduced in
    },
    "activation_checkpoint": {          # TorchTitan's names
        "mode": "none",                 # none | selective | full
        "selective_ac_option": "2",     # selective: "op", or every N-th block ("2")
    },
    "checkpoint": {
        "enable": True,
        "folder": "checkpoint",         # under job.dump_folder
        "interval": 100,                # steps; the last step is always saved
        "keep_latest_k": 2,             # 0: keep all
        "resume": True,                 # continue from the newest complete checkpoint in
                                        # the folder (TorchTitan's); false: start fresh
        "async_mode": "disabled",       # disabled | async: the step loop goes on while
                                        # the checkpoint is written (TorchTitan's name)
    },
    "preemption": {                     # docs/fault_tolerance.md
        "signals": "SIGTERM",           # comma-separated; "": not caught
        "grace_period_seconds": 25.0,   # the checkpoint must be written within it (under
                                        # torchrun's 30 s from its SIGTERM to its SIGKILL)
        "exit_code": 143,               # non-zero: torchrun --max-restarts restarts on it
    },
    "comm": {                           # TorchTitan's names
        "init_timeout_seconds": 300.0,  # collectives until the first step is done
        "train_timeout_seconds": 100.0, # collectives after it: a hung one fails after this
        "trace_buf_size": 2000,         # flight recorder: last N collectives per group (0: off)
        "save_traces_folder": "comm_traces",  # under job.dump_folder: rank_<r>.json on a timeout
    },
    "parallelism": {                    # TorchTitan's names; the product is the world size
        "data_parallel_replicate_degree": 1,   # DDP
        "data_parallel_shard_degree": -1,      # FSDP2 fully_shard; -1: the rest of the ranks
        "tensor_parallel_degree": 1,           # DTensor TP of the llama blocks (all ranks)
        "fsdp": "auto",                        # fully_shard (FSDP2) | simple (SimpleFSDP) |
                                               # auto: simple with compile_mode = "step",
                                               # else fully_shard
    },
    "metrics": {
        "log_freq": 10,
        "peak_flops": 0.0,              # FLOP/s of the device; 0: measure at start
        "plot": True,                   # loss-curve PNG in job.dump_folder
        "progress_bar": True,
        "enable_tensorboard": "auto",   # true | false | auto (on when tensorboard is installed)
        "save_tb_folder": "tb",
    },
    "profiling": {                      # TorchTitan's names (trainer/profiling.py)
        "enable_profiling": False,
        "enable": False,                # the same switch (issue 12's spelling)
        "save_traces_folder": "profile_traces",  # under job.dump_folder
        "profile_freq": 10,             # a trace every profile_freq steps
        "profiler_warmup": 3,           # steps before the traced ones
        "profiler_active": 1,           # steps traced
    },
}


class ConfigError(ValueError):
    pass


def _parse_value(text, default, key):
    if isinstance(default, bool):
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"--{key}: expected true or false, got {text!r}")
    try:
        return type(default)(text)
    except ValueError:
        raise ConfigError(f"--{key}: expected {type(default).__name__}, got {text!r}") from None


# Keys that take true, false or "auto": a bool (TOML, a bare flag) is kept as
# the string "true" / "false".
_ON_OFF_AUTO = {("metrics", "enable_tensorboard")}


def _merge(cfg, updates, origin):
    for section, values in updates.items():
        if section not in cfg or not isinstance(values, dict):
            raise ConfigError(f"{origin}: unknown section [{section}] "
                              f"(known: {', '.join(cfg)})")
        for key, value in values.items():
            if key not in cfg[section]:
                raise ConfigError(f"{origin}: unknown key {section}.{key} "
                                  f"(known: {', '.join(cfg[section])})")
            default = cfg[section][key]
            if (section, key) in _ON_OFF_AUTO and isinstance(value, bool):
                value = "true" if value else "false"
            if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if type(value) is not type(default):
                raise ConfigError(f"{origin}: {section}.{key} = {value!r}: expected "
                                  f"{type(default).__name__}")
            cfg[section][key] = value


def parse_overrides(argv):
    """["--training.steps", "5", "--checkpoint.resume"] -> {"training": {...}}
    (values still strings, or True for a bare flag)."""
    out, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or "." not in arg:
            raise ConfigError(f"unexpected argument {arg!r}: expected --section.key [value]")
        name = arg[2:]
        if "=" in name:
            name, value = name.split("=", 1)
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]
            i += 2
        else:
            value, i = True, i + 1
        section, key = name.split(".", 1)
        out.setdefault(section, {})[key] = value
    return out


def load_config(path=None, overrides=None, argv=None):
    """Defaults <- TOML file `path` <- `overrides` (a nested dict of typed
    values) <- `argv` (command-line strings). Returns a nested dict."""
    cfg = copy.deepcopy(DEFAULTS)
    if path:
        with open(path, "rb") as f:
            _merge(cfg, tomllib.load(f), path)
    if overrides:
        _merge(cfg, overrides, "overrides")
    if argv:
        typed = {}
        for section, values in parse_overrides(argv).items():
            if section not in cfg:
                raise ConfigError(f"--{section}.*: unknown section (known: {', '.join(cfg)})")
            for key, value in values.items():
                if key not in cfg[section]:
                    raise ConfigError(f"--{section}.{key}: unknown key "
                                      f"(known: {', '.join(cfg[section])})")
                default = cfg[section][key]
                if value is True and (section, key) in _ON_OFF_AUTO:
                    value = "true"
                if value is True and not isinstance(default, bool):
                    raise ConfigError(f"--{section}.{key}: needs a value")
                if value is not True:
                    value = _parse_value(value, default, f"{section}.{key}")
                typed.setdefault(section, {})[key] = value
        _merge(cfg, typed, "command line")
    validate(cfg)
    return cfg


def validate(cfg):
    t, o = cfg["training"], cfg["optimizer"]
    for section, key in _ON_OFF_AUTO:
        if str(cfg[section][key]).strip().lower() not in ("true", "false", "auto"):
            raise ConfigError(f"{section}.{key} = {cfg[section][key]!r}: expected true, false "
                              f"or auto")
    if t["device"] not in ("tpu", "cpu"):
        raise ConfigError(f"training.device = {t['device']!r}: expected tpu or cpu")
    if t["mixed_precision"] not in ("float32", "bfloat16"):
        raise ConfigError(f"training.mixed_precision = {t['mixed_precision']!r}: "
                          f"expected float32 or bfloat16")
    for key in ("mixed_precision_param", "mixed_precision_reduce"):
        if t[key] not in ("float32", "bfloat16"):
            raise ConfigError(f"training.{key} = {t[key]!r}: expected float32 or bfloat16")
    if cfg["parallelism"]["fsdp"] not in ("auto", "fully_shard", "simple"):
        raise ConfigError(f"parallelism.fsdp = {cfg['parallelism']['fsdp']!r}: expected "
                          f"fully_shard (FSDP2), simple (SimpleFSDP) or auto")
    if cfg["checkpoint"]["async_mode"] not in ("disabled", "async"):
        raise ConfigError(f"checkpoint.async_mode = {cfg['checkpoint']['async_mode']!r}: "
                          f"expected disabled or async")
    validate_preemption(cfg["preemption"])
    c = cfg["comm"]
    if c["init_timeout_seconds"] <= 0 or c["train_timeout_seconds"] <= 0:
        raise ConfigError("comm.init_timeout_seconds and comm.train_timeout_seconds must be "
                          "positive")
    if c["trace_buf_size"] < 0:
        raise ConfigError(f"comm.trace_buf_size = {c['trace_buf_size']}: must be at least 0")
    if o["name"].lower() not in ("adamw", "adam", "sgd"):
        raise ConfigError(f"optimizer.name = {o['name']!r}: expected AdamW, Adam or SGD")
    if o["implementation"] not in ("foreach", "for-loop", "fused"):
        raise ConfigError(f"optimizer.implementation = {o['implementation']!r}: "
                          f"expected foreach, for-loop or fused")
    if cfg["lr_scheduler"]["decay_type"] not in ("cosine", "linear", "constant"):
        raise ConfigError("lr_scheduler.decay_type: expected cosine, linear or constant")
    for key in ("steps", "local_batch_size", "seq_len", "gradient_accumulation_steps"):
        if t[key] < 1:
            raise ConfigError(f"training.{key} = {t[key]}: must be at least 1")
    if t["compile_mode"] not in ("graphs", "step"):
        raise ConfigError(f"training.compile_mode = {t['compile_mode']!r}: expected graphs "
                          f"(forward+backward and optimizer graphs) or step (the whole step "
                          f"as one program)")
    if t["compile_mode"] == "step":
        t["compile"] = True  # compile_mode = "step" implies training.compile
        if t["device"] != "tpu":
            raise ConfigError("training.compile_mode = 'step' runs on the tpu device "
                              f"(training.device = {t['device']!r})")
        if o["implementation"] == "fused":
            raise ConfigError("training.compile_mode = 'step' computes the optimizer update "
                              "inside the step's program; optimizer.implementation = 'fused' "
                              "(a separate fused kernel) cannot be part of it: use foreach "
                              "or for-loop")
    if cfg["metrics"]["log_freq"] < 1:
        raise ConfigError("metrics.log_freq: must be at least 1")
    validate_activation_checkpoint(cfg["activation_checkpoint"])
    p = cfg["profiling"]
    if p["profiler_active"] < 1 or p["profiler_warmup"] < 0:
        raise ConfigError("profiling.profiler_active must be at least 1 and "
                          "profiling.profiler_warmup at least 0")
    if p["profiler_active"] + p["profiler_warmup"] > p["profile_freq"]:
        raise ConfigError(f"profiling.profile_freq = {p['profile_freq']}: must be at least "
                          f"profiler_warmup + profiler_active = "
                          f"{p['profiler_warmup'] + p['profiler_active']}")


def signal_numbers(text):
    """preemption.signals ("SIGTERM,SIGUSR1") -> [signal numbers]; ConfigError
    naming an unknown one."""
    import signal
    out = []
    for name in filter(None, (n.strip().upper() for n in text.split(","))):
        name = name if name.startswith("SIG") else "SIG" + name
        num = getattr(signal, name, None)
        if not isinstance(num, signal.Signals) or name in ("SIGKILL", "SIGSTOP"):
            raise ConfigError(f"preemption.signals: {name} is not a signal a process can catch "
                              f"(e.g. SIGTERM, SIGUSR1)")
        out.append(num)
    return out


def validate_preemption(p):
    signal_numbers(p["signals"])
    if p["grace_period_seconds"] <= 0:
        raise ConfigError(f"preemption.grace_period_seconds = {p['grace_period_seconds']}: "
                          f"must be positive")
    if not 0 < p["exit_code"] < 256:
        raise ConfigError(f"preemption.exit_code = {p['exit_code']}: expected 1..255 (a "
                          f"non-zero exit is what torchrun restarts on)")


def validate_activation_checkpoint(ac):
    """[activation_checkpoint]: mode none | selective | full; for selective,
    selective_ac_option "op" or a positive integer N (every N-th block)."""
    mode, option = ac["mode"], ac["selective_ac_option"]
    if mode not in ("none", "selective", "full"):
        raise ConfigError(f"activation_checkpoint.mode = {mode!r}: expected none, selective "
                          f"or full")
    if mode == "selective" and option != "op":
        try:
            every = int(option)
        except ValueError:
            every = 0
        if every < 1:
            raise ConfigError(f"activation_checkpoint.selective_ac_option = {option!r}: "
                              f"expected 'op' or a positive integer (every N-th block)")
