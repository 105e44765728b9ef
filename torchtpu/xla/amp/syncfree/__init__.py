"""torch_xla.amp.syncfree: Adam, AdamW and SGD whose step skips the update
when GradScaler found an inf (found_inf).

PyTorch/XLA writes these so that the skip needs no device-to-host read.
Here step(found_inf=...) reads the flag (one small synchronisation) and
then runs torch.optim's own step, or skips it: the same values, not sync-free."""
import torch

__all__ = ["Adam", "AdamW", "SGD"]


def _skip(found_inf):
    return found_inf is not None and bool(torch.as_tensor(found_inf).item())


class _SyncFree:
    def step(self, closure=None, found_inf=None):
        if _skip(found_inf):
            return None
        return super().step(closure)


class Adam(_SyncFree, torch.optim.Adam):
    pass


class AdamW(_SyncFree, torch.optim.AdamW):
    pass


class SGD(_SyncFree, torch.optim.SGD):
    pass
