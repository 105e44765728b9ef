"""runtime_info reports what backs the "tpu" device."""
import os

import torch

import torchtpu


def test_runtime_info():
    info = torchtpu.runtime_info()
    for key in ("platform", "platform_version", "plugin_path", "api_version",
                "device_count", "device_kind", "supports_f64"):
        assert key in info, key
    assert info["device_count"] == torch.tpu.device_count() >= 1
    assert os.path.exists(info["plugin_path"])
    major, minor = info["api_version"]
    assert major == 0 and minor >= 81
    if "TORCHTPU_PLUGIN_PATH" not in os.environ:
        assert info["platform"] == "cpu"  # no TPU on this machine


def test_device_count_is_configurable():
    import subprocess
    import sys
    code = "import torch, torchtpu; print(torch.tpu.device_count())"
    env = dict(os.environ, TORCHTPU_CPU_DEVICES="4")
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("4"), out.stderr


def test_second_device_runs_ops():
    import subprocess
    import sys
    code = ("import torch, torchtpu\n"
            "x = torch.arange(4.0, device='tpu:1')\n"
            "y = (x * 2 + 1)\n"
            "print(y.device, y.cpu().tolist())\n")
    env = dict(os.environ, TORCHTPU_CPU_DEVICES="2")
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=300)
    assert "tpu:1 [1.0, 3.0, 5.0, 7.0]" in out.stdout, out.stderr
