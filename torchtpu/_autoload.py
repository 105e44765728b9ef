"""The torch.backends entry point: `import torch` imports torchtpu, so code
written for a device string alone ("tpu") runs with no `import torchtpu`
(torchrun -m torchtitan.train, transformers' scripts). torch calls
`autoload()` while it is itself being imported, unless
TORCH_DEVICE_BACKEND_AUTOLOAD=0. Importing torchtpu registers the device
and loads the native libraries; the runtime (PJRT plugin, client) still
starts lazily, on the first tpu tensor."""


def autoload():
    # A missing or stale native build must not break `import torch` itself
    # (nor the build, which asks torch for its paths): say so and go on;
    # an explicit `import torchtpu` raises the same error.
    try:
        import torchtpu  # noqa: F401  (registration happens on import)
    except ImportError as e:
        import warnings
        warnings.warn(f"torchtpu not loaded: {e}", RuntimeWarning, stacklevel=2)
