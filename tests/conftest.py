"""Every test runs with torchtpu imported: the "tpu" device is registered."""
import torchtpu  # noqa: F401
