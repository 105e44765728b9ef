"""PyTorch/XLA scripts run unchanged on "tpu" through `python -m torchtpu.xla`.

The scripts below are written in PyTorch/XLA's own style (its MNIST, ResNet
and LM examples: xm.xla_device, MpDeviceLoader, xm.optimizer_step, step
closures, xmp.spawn, torch_xla.launch + DDP on the "xla" process group).
Each runs in a subprocess through the launcher; its losses are compared step
by step with the same model trained on the CPU in this process (loss within
1e-4 relative), data-parallel runs with one CPU process on the concatenated
batches. torch_xla is never imported in the pytest process: its import hook
and "xla" device alias would reach the other test files."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

RTOL = 1e-4

# --- the models, the data and the CPU reference (plain PyTorch) --------------------------

MODELS = textwrap.dedent('''
    """Models and data shared by the scripts and the CPU reference; no torch_xla."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    VOCAB, SEQ = 32, 8


    class MLP(nn.Module):  # MNIST-like
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(64, 32), nn.Linear(32, 10)

        def forward(self, x):
            return F.log_softmax(self.fc2(F.relu(self.fc1(x.flatten(1)))), dim=1)


    class CNN(nn.Module):  # PyTorch/XLA's MNIST net, smaller
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3)
            self.conv2 = nn.Conv2d(4, 8, 3)
            self.fc = nn.Linear(8 * 2 * 2, 10)

        def forward(self, x):
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(self.conv2(x))
            x = F.adaptive_avg_pool2d(x, 2)
            return F.log_softmax(self.fc(x.flatten(1)), dim=1)


    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            return F.relu(x + self.bn2(self.conv2(y)))


    class ResNet(nn.Module):  # a tiny ResNet: stem, one residual block, pool, fc
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(8), nn.ReLU())
            self.block = Block(8)
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            x = self.block(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


    class LM(nn.Module):  # a tiny decoder-only LM: one pre-norm causal block
        def __init__(self, d=16, heads=2):
            super().__init__()
            self.heads = heads
            self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(SEQ, d)
            self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.head = nn.Linear(d, VOCAB, bias=False)

        def forward(self, idx):
            b, t = idx.shape
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
            x = x + self.mlp(self.ln2(x))
            return self.head(self.lnf(x))


    NAMES = {"mlp": MLP, "cnn": CNN, "resnet": ResNet, "lm": LM}


    def make(name):
        torch.manual_seed(0)
        return NAMES[name]()


    def batches(name, steps, batch):
        """The global batches (CPU tensors), the same in every process."""
        g = torch.Generator().manual_seed(1)
        out = []
        for _ in range(steps):
            if name == "lm":
                seq = torch.randint(0, VOCAB, (batch, SEQ + 1), generator=g)
                out.append((seq[:, :-1], seq[:, 1:]))
                continue
            shape = {"mlp": (batch, 1, 8, 8), "cnn": (batch, 1, 10, 10),
                     "resnet": (batch, 3, 8, 8)}[name]
            out.append((torch.randn(shape, generator=g), torch.randint(0, 10, (batch,),
                                                                       generator=g)))
        return out


    def loss_fn(name, out, y):
        if name in ("mlp", "cnn"):
            return F.nll_loss(out, y)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


    def optimizer(name, params):
        if name == "lm":
            return torch.optim.AdamW(params, lr=1e-2)
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)


    def cpu_losses(name, steps, batch):
        """The reference: one CPU process on the global batches."""
        model = make(name)
        opt = optimizer(name, model.parameters())
        losses = []
        for x, y in batches(name, steps, batch):
            opt.zero_grad()
            loss = loss_fn(name, model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
''')

# PyTorch/XLA's training-script shape: one function per process, an
# MpDeviceLoader, xm.optimizer_step, losses read in a step closure.
TRAIN = textwrap.dedent('''
    import argparse
    import json

    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.xla_multiprocessing as xmp
    import torch_xla.runtime as xr

    import models


    def train(name, flags):
        device = xm.xla_device()
        model = models.make(name).to(device)
        opt = models.optimizer(name, model.parameters())
        world, rank = xr.world_size(), xr.global_ordinal()
        shards = [(x.chunk(world)[rank], y.chunk(world)[rank])
                  for x, y in models.batches(name, flags.steps, flags.batch)]
        loader = pl.MpDeviceLoader(
            torch.utils.data.DataLoader(shards, batch_size=None), device)
        assert len(loader) == flags.steps
        losses = []
        model.train()
        for x, y in loader:
            assert x.device == device, (x.device, device)
            opt.zero_grad()
            loss = models.loss_fn(name, model(x), y)
            loss.backward()
            xm.optimizer_step(opt)
            xm.add_step_closure(lambda v: losses.append(v.item()), args=(loss,))
        return losses  # the loader's last mark_step ran the last closure


    def _mp_fn(index, flags):
        assert index == xr.global_ordinal()
        out = {name: train(name, flags) for name in flags.models.split(",")}
        out["device"] = str(xm.xla_device())
        out["world"] = xr.world_size()
        with open(f"{flags.out}.{index}", "w") as f:
            json.dump(out, f)


    if __name__ == "__main__":
        p = argparse.ArgumentParser()
        p.add_argument("--models", default="mlp")
        p.add_argument("--steps", type=int, default=3)
        p.add_argument("--batch", type=int, default=8)
        p.add_argument("--out", required=True)
        p.add_argument("--spawn", action="store_true")
        flags = p.parse_args()
        if flags.spawn:
            xmp.spawn(_mp_fn, args=(flags,))
        else:
            _mp_fn(0, flags)
''')

# torch_xla.launch + DDP with the "xla" process group (PyTorch/XLA's DDP guide).
DDP = textwrap.dedent('''
    import json
    import sys

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_backend  # noqa: F401
    import torch_xla.runtime as xr

    import models


    def _mp_fn(index, name, steps, batch, out):
        dist.init_process_group("xla", init_method="xla://")
        assert dist.get_backend() == "xla", dist.get_backend()
        world, rank = dist.get_world_size(), dist.get_rank()
        assert (world, rank) == (xr.world_size(), xr.global_ordinal())
        device = torch_xla.device()
        model = DDP(models.make(name).to(device), gradient_as_bucket_view=True)
        opt = models.optimizer(name, model.parameters())
        losses = []
        for x, y in models.batches(name, steps, batch):
            x, y = x.chunk(world)[rank].to(device), y.chunk(world)[rank].to(device)
            opt.zero_grad()
            loss = models.loss_fn(name, model(x), y)
            loss.backward()
            opt.step()
            torch_xla.sync()
            losses.append(loss.item())
        with open(f"{out}.{index}", "w") as f:
            json.dump({"losses": losses, "world": world}, f)
        dist.destroy_process_group()


    if __name__ == "__main__":
        name, steps, batch, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        torch_xla.launch(_mp_fn, args=(name, steps, batch, out))
''')

# The collectives, rendezvous, xm.save, amp, step closures, metrics, SPMD on 2 processes.
FEATURES = textwrap.dedent('''
    import json
    import sys

    import torch
    import torch.nn as nn
    import torch_xla
    import torch_xla.amp
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.spmd as xs
    import torch_xla.distributed.xla_multiprocessing as xmp
    import torch_xla.runtime as xr


    def value(rank):
        return torch.arange(8, dtype=torch.float32).reshape(4, 2) + 10 * rank


    def _mp_fn(index, out):
        dev = xm.xla_device()
        rank, world = xr.global_ordinal(), xr.world_size()
        res = {"index": index, "rank": rank, "world": world, "device": str(dev),
               "master": xm.is_master_ordinal(local=False)}
        t = value(rank).to("xla")
        res["device_type"] = t.device.type
        res["all_reduce"] = xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5).cpu().tolist()
        res["all_reduce_max"] = xm.all_reduce(xm.REDUCE_MAX, t).cpu().tolist()
        pair = [t.clone(), (t * 2).clone()]
        back = xm.all_reduce(xm.REDUCE_SUM, pair)
        res["list_in_place"] = back is pair and pair[1].device == dev
        res["list"] = [p.cpu().tolist() for p in pair]
        res["t_unchanged"] = t.cpu().tolist()
        res["all_gather"] = xm.all_gather(t, dim=0).cpu().tolist()
        res["all_gather1"] = xm.all_gather(t, dim=1).cpu().tolist()
        res["reduce_scatter"] = xm.reduce_scatter(xm.REDUCE_SUM, t, 1.0, 0, world).cpu().tolist()
        res["permute"] = xm.collective_permute(
            t, [[r, (r + 1) % world] for r in range(world)]).cpu().tolist()
        res["rendezvous"] = [p.decode() for p in xm.rendezvous("tag", f"from {rank}".encode())]
        res["rendezvous2"] = [p.decode() for p in xm.rendezvous("tag", f"again {rank}".encode())]
        res["mesh_reduce"] = xm.mesh_reduce("acc", torch.tensor([rank + 1.0], device=dev),
                                            lambda xs: float(sum(x.item() for x in xs)))

        # step closures: run at mark_step, in the order added, after the step's work
        order = []
        y = t * 3
        xm.add_step_closure(lambda a: order.append(("first", a.sum().item())), args=(y,))
        xm.add_step_closure(lambda: order.append(("second", None)))
        res["before_mark_step"] = list(order)
        xm.mark_step()
        res["after_mark_step"] = order
        torch_xla.sync()
        res["after_second_sync"] = len(order)

        # amp: bf16 inside autocast, fp32 outside
        lin = nn.Linear(2, 3).to(dev)
        with torch_xla.amp.autocast(dev):
            inside = lin(t)
            inside_loss = inside.float().log_softmax(-1)
            soft = torch.softmax(inside, -1)
        res["amp"] = [str(inside.dtype), str(soft.dtype), str(lin(t).dtype),
                      str(inside_loss.dtype)]
        res["amp_close"] = torch.allclose(inside.float().cpu(), lin(t).cpu(), atol=0.1)

        # xm.save: CPU tensors, written by the master only
        state = {"model": lin.state_dict(), "step": 3, "nested": [t, {"y": y}]}
        xm.save(state, out + ".ckpt")
        res["lin"] = {k: v.cpu().tolist() for k, v in lin.state_dict().items()}

        # metrics in PyTorch/XLA's layout
        res["short_report"] = met.short_metrics_report()
        res["report"] = met.metrics_report()
        res["counter_names"] = met.counter_names()
        res["mark_steps"] = met.counter_value("MarkStep")

        # SPMD over the processes: mark_sharding gives a DTensor
        xr.use_spmd()
        mesh = xs.Mesh(range(world), (world,), ("data",))
        w = torch.arange(12, dtype=torch.float32).reshape(4, 3).to(dev)
        dw = xs.mark_sharding(w, mesh, ("data", None))
        res["spmd"] = {"type": type(dw).__name__, "placements": str(dw.placements),
                       "local": dw.to_local().cpu().tolist(),
                       "full": dw.full_tensor().cpu().tolist(),
                       "world_size": xr.world_size()}
        with open(f"{out}.{index}", "w") as f:
            json.dump(res, f)


    if __name__ == "__main__":
        xmp.spawn(_mp_fn, args=(sys.argv[1],))
''')

# Single-process checks: the hook, "xla" strings, compile, SPMD errors.
SINGLE = textwrap.dedent('''
    import json
    import sys

    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    import torch_xla.utils.utils as xu

    res = {"argv": sys.argv[1:], "name": torch_xla.__name__, "main": __name__}
    dev = torch_xla.device()
    res["device"] = str(dev)
    res["strings"] = [str(torch.ones(2).to("xla").device),
                      str(torch.zeros(2, device="xla").device),
                      str(torch.ones(2).to(torch.device("xla", 0)).device),
                      str(torch.nn.Linear(2, 2).to("xla").weight.device),
                      str(torch.randn(2, device="xla:0").device)]
    res["is_xla_tensor"] = xm.is_xla_tensor(torch.ones(2, device=dev))
    res["world"] = [xr.world_size(), xr.global_ordinal(), xr.local_ordinal(),
                    xm.xrt_world_size(), xm.get_ordinal(), xm.is_master_ordinal()]
    res["samples"] = len(list(xu.SampleGenerator(torch.zeros(2), 5)))

    def f(a, b):
        return torch.sin(a) * b + 1

    a, b = torch.randn(5), torch.randn(5)
    compiled = torch_xla.compile(f)
    res["compile"] = [compiled(a.to(dev), b.to(dev)).cpu().tolist(), f(a, b).tolist()]
    with torch_xla.step():
        z = f(a.to(dev), b.to(dev)) * 2
    res["step"] = [z.cpu().tolist(), (f(a, b) * 2).tolist()]

    ran = []
    torch_xla.launch(lambda i, tag: ran.append((i, tag)), args=("x",), debug_single_process=True)
    res["debug_single_process"] = ran

    try:
        import torch_xla.experimental.no_such_module  # noqa: F401
    except ModuleNotFoundError as e:
        res["missing"] = str(e)

    def error(fn):
        try:
            fn()
        except NotImplementedError as e:
            return str(e)
        return None

    t = torch.ones(4, 4, device=dev)
    res["one_device_mesh"] = xs.mark_sharding(t, xs.Mesh([0], (1,), ("x",)), ("x", None)) is t
    res["errors"] = {
        "use_spmd_auto": error(lambda: xr.use_spmd(auto=True)),
        "mesh_in_one_process": error(lambda: xs.mark_sharding(
            t, xs.Mesh(range(4), (2, 2), ("a", "b")), ("a", "b"))),
        "enable_manual_sharding": error(lambda: xs.enable_manual_sharding(t, (None, None))),
        "disable_manual_sharding": error(lambda: xs.disable_manual_sharding(t, (None,), (4,))),
        "SpmdFullyShardedDataParallel": error(lambda: xs.SpmdFullyShardedDataParallel(None)),
        "XLAShardedTensor": error(lambda: xs.XLAShardedTensor(t)),
        "_XLAC": error(lambda: torch_xla._XLAC._xla_get_default_device()),
    }
    with open(sys.argv[1], "w") as fh:
        json.dump(res, fh)
''')


# --- helpers ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    d = tmp_path_factory.mktemp("xla_scripts")
    for name, text in (("models.py", MODELS), ("train.py", TRAIN), ("ddp.py", DDP),
                       ("features.py", FEATURES), ("single.py", SINGLE)):
        (d / name).write_text(text)
    return d


@pytest.fixture(scope="module")
def models(scripts):
    spec = importlib.util.spec_from_file_location("xla_test_models", scripts / "models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def launch(scripts, *args, devices=None, timeout=240):
    """python -m torchtpu.xla <args> in the scripts' folder."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHTPU_CPU_DEVICES"):
        env.pop(key, None)
    if devices:
        env["TORCHTPU_CPU_DEVICES"] = str(devices)
    proc = subprocess.run([sys.executable, "-m", "torchtpu.xla", *map(str, args)], cwd=scripts,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def read(path):
    with open(path) as f:
        return json.load(f)


def assert_losses(got, want):
    assert len(got) == len(want), (got, want)
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= RTOL * abs(w), f"step {step}: tpu {g} vs cpu {w}"


def mean_over_ranks(runs, key):
    return [sum(r[key][s] for r in runs) / len(runs) for s in range(len(runs[0][key]))]


# --- training scripts against the CPU ---------------------------------------------------

def test_single_device_scripts_match_cpu(scripts, models, tmp_path):
    """MNIST-like MLP and CNN, a tiny ResNet (BatchNorm) and a decoder-only LM,
    one device, no spawn: every step's loss equals the CPU's."""
    names = ["mlp", "cnn", "resnet", "lm"]
    out = tmp_path / "single"
    launch(scripts, "train.py", "--models", ",".join(names), "--steps", 3, "--batch", 8,
           "--out", out)
    got = read(f"{out}.0")
    assert got["device"] == "tpu:0" and got["world"] == 1
    for name in names:
        assert_losses(got[name], models.cpu_losses(name, 3, 8))


@pytest.mark.parametrize("nprocs,names", [(2, "cnn,lm"), (4, "mlp")])
def test_xmp_spawn_equals_one_process_on_concatenated_batches(scripts, models, tmp_path,
                                                                nprocs, names):
    """xmp.spawn on every local device (2, 4): one process per device,
    xm.optimizer_step averages gradients; the mean loss over ranks equals
    one CPU process on the global batch, step by step."""
    out = tmp_path / "spawn"
    launch(scripts, "train.py", "--spawn", "--models", names, "--steps", 3, "--batch", 8,
           "--out", out, devices=nprocs)
    runs = [read(f"{out}.{r}") for r in range(nprocs)]
    assert [r["device"] for r in runs] == [f"tpu:{r}" for r in range(nprocs)]
    assert {r["world"] for r in runs} == {nprocs}
    for name in names.split(","):
        assert_losses(mean_over_ranks(runs, name), models.cpu_losses(name, 3, 8))


def test_launch_ddp_xla_process_group(scripts, models, tmp_path):
    """torch_xla.launch + DDP on init_process_group("xla", init_method="xla://")."""
    out = tmp_path / "ddp"
    launch(scripts, "ddp.py", "mlp", 3, 8, out, devices=2)
    runs = [read(f"{out}.{r}") for r in range(2)]
    assert {r["world"] for r in runs} == {2}
    assert_losses(mean_over_ranks(runs, "losses"), models.cpu_losses("mlp", 3, 8))


# --- collectives, rendezvous, save, amp, closures, metrics, SPMD -------------------------

def test_collectives_rendezvous_save_amp_closures_metrics(scripts, tmp_path):
    out = str(tmp_path / "features")
    world = 2
    launch(scripts, "features.py", out, devices=world)
    runs = [read(f"{out}.{r}") for r in range(world)]
    values = [torch.arange(8, dtype=torch.float32).reshape(4, 2) + 10 * r for r in range(world)]
    total = sum(values)
    for r, res in enumerate(runs):
        assert (res["index"], res["rank"], res["world"]) == (r, r, world)
        assert res["device"] == f"tpu:{r}" and res["device_type"] == "tpu"
        assert res["master"] == (r == 0)
        assert res["all_reduce"] == (total * 0.5).tolist()
        assert res["all_reduce_max"] == torch.maximum(*values).tolist()
        assert res["list_in_place"]
        assert res["list"] == [total.tolist(), (total * 2).tolist()]
        assert res["t_unchanged"] == values[r].tolist()
        assert res["all_gather"] == torch.cat(values, 0).tolist()
        assert res["all_gather1"] == torch.cat(values, 1).tolist()
        assert res["reduce_scatter"] == total.chunk(world, 0)[r].tolist()
        assert res["permute"] == values[(r - 1) % world].tolist()
        assert res["rendezvous"] == [f"from {i}" for i in range(world)]
        assert res["rendezvous2"] == [f"again {i}" for i in range(world)]
        assert res["mesh_reduce"] == sum(range(1, world + 1))
        # step closures
        assert res["before_mark_step"] == []
        assert res["after_mark_step"] == [["first", (values[r] * 3).sum().item()],
                                          ["second", None]]
        assert res["after_second_sync"] == 2
        # amp
        assert res["amp"] == ["torch.bfloat16", "torch.float32", "torch.float32",
                              "torch.float32"]
        assert res["amp_close"]
        # metrics
        assert res["short_report"].startswith(("Metric: CompileTime\n  TotalSamples: ",
                                               "Counter: "))
        assert "Counter: MarkStep\n  Value: 2\n" in res["short_report"]
        assert "Counter: MarkStep\n  Value: 2\n" in res["report"]
        assert "MarkStep" in res["counter_names"] and res["mark_steps"] == 2
        for line in res["report"].splitlines():
            assert line.startswith(("Metric: ", "Counter: ", "  TotalSamples: ",
                                    "  Accumulator: ", "  Percentiles: ", "  Value: ")), line
        # SPMD: a DTensor sharded over the processes
        full = torch.arange(12, dtype=torch.float32).reshape(4, 3)
        assert res["spmd"] == {"type": "DTensor", "placements": "(Shard(dim=0),)",
                               "local": full.chunk(world)[r].tolist(),
                               "full": full.tolist(), "world_size": 1}
    # xm.save: written once, CPU tensors, loadable by plain PyTorch without torchtpu
    check = textwrap.dedent(f'''
        import sys, torch
        state = torch.load({out + ".ckpt"!r}, weights_only=True)
        assert "torchtpu" not in sys.modules, "torchtpu was imported"
        devices = {{str(v.device) for v in state["model"].values()}}
        devices |= {{str(state["nested"][0].device), str(state["nested"][1]["y"].device)}}
        print(repr(({{k: v.tolist() for k, v in state["model"].items()}}, state["step"],
                    sorted(devices), state["nested"][0].tolist())))
    ''')
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model, step, devices, nested = eval(proc.stdout.strip())  # noqa: S307  our own repr
    assert (model, step, devices, nested) == (runs[0]["lin"], 3, ["cpu"], values[0].tolist())


# --- the hook, "xla" strings, compile, unsupported SPMD ----------------------------------

def test_single_process_hook_compile_and_unsupported(scripts, tmp_path):
    out = tmp_path / "single.json"
    launch(scripts, "single.py", out)
    res = read(out)
    assert res["argv"] == [str(out)] and res["main"] == "__main__"
    assert res["name"] == "torchtpu.xla"
    assert res["device"] == "tpu:0"
    assert res["strings"] == ["tpu:0"] * 5
    assert res["is_xla_tensor"]
    assert res["world"] == [1, 0, 0, 1, 0, True]
    assert res["samples"] == 5
    for got, want in (res["compile"], res["step"]):
        assert torch.allclose(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    assert res["debug_single_process"] == [[0, "x"]]
    assert "torch_xla.experimental: this PyTorch/XLA module has no torchtpu" in res["missing"]
    assert res["one_device_mesh"]
    errors = res["errors"]
    names = {"use_spmd_auto": "use_spmd(auto=True)",
             "mesh_in_one_process": "mark_sharding over a 4-device mesh in one process",
             "enable_manual_sharding": "enable_manual_sharding",
             "disable_manual_sharding": "disable_manual_sharding",
             "SpmdFullyShardedDataParallel": "SpmdFullyShardedDataParallel",
             "XLAShardedTensor": "XLAShardedTensor",
             "_XLAC": "torch_xla._XLAC._xla_get_default_device"}
    for key, api in names.items():
        assert errors[key] is not None, f"{key} did not raise NotImplementedError"
        assert api in errors[key], errors[key]
        assert "docs/migrating_from_torch_xla.md" in errors[key]
    assert "distribute_tensor" in errors["mesh_in_one_process"]


def test_without_the_hook_torch_xla_is_not_importable():
    """Nothing named torch_xla is installed: without torchtpu.xla, the import
    fails as on any machine without PyTorch/XLA (a real install would win)."""
    proc = subprocess.run([sys.executable, "-c", "import torch_xla"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and "No module named 'torch_xla'" in proc.stderr


def test_launcher_usage_and_console_script():
    proc = subprocess.run([sys.executable, "-m", "torchtpu.xla"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "usage: python -m torchtpu.xla" in proc.stderr
    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml")) as f:
        assert 'torchtpu-xla = "torchtpu.xla.__main__:main"' in f.read()
