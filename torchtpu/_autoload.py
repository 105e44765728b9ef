"""The torch.backends entry point: `import torch` imports torchtpu, so code
written for a device string alone ("tpu") runs with no `import torchtpu`
(torchrun -m torchtitan.train, transformers' scripts). torch calls
`autoload()` while it is itself being imported, unless
TORCH_DEVICE_BACKEND_AUTOLOAD=0. Importing torchtpu registers the device
and loads the native libraries; the runtime (PJRT plugin, client) still
starts lazily, on the first tpu tensor."""


def autoload():
    import torchtpu  # noqa: F401  (registration happens on import)
