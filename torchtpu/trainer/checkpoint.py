"""Checkpoints: one file per saved step, step-<N>.pt, written atomically.

save() writes the whole state to a temporary file in the same folder, flushes
it to disk, then renames it over the final name (os.replace is atomic on one
file system). A crash or kill at any point of a save leaves the previous
checkpoints as they were; a left-over temporary file is ignored and removed
by a later save. Temporary names carry the host, the process id and a random
token, and a save removes only the temporaries of dead writers (same host,
process gone) or old ones (an hour), so processes saving into one folder
never delete each other's files in flight. load_latest() tries the newest step first and falls back to
an older one if a file cannot be read.

A checkpoint holds the model, optimizer and LR-scheduler state dicts, the step,
the random-number states (CPU and device) and the losses so far; tensors stay
on their device in the file and torch.load(map_location=...) puts them on any
device.
"""
import glob
import os
import re
import secrets
import socket
import time
import warnings

import torch

_NAME = re.compile(r"^step-(\d+)\.pt$")
_TMP_SUFFIX = ".tmp"
_TMP_NAME = re.compile(r"\.([^.]+)\.(\d+)\.[0-9a-f]+\.tmp$")
_STALE_SECONDS = 3600


def path_for(folder, step):
    return os.path.join(folder, f"step-{step}.pt")


def list_steps(folder):
    """Saved steps in `folder`, oldest first."""
    if not os.path.isdir(folder):
        return []
    steps = []
    for name in os.listdir(folder):
        m = _NAME.match(name)
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps)


def save(state, folder, step, keep_latest_k=0):
    """Writes `state` as step-<step>.pt in `folder`, atomically; then keeps
    only the newest `keep_latest_k` checkpoints (0: all). Returns the path."""
    os.makedirs(folder, exist_ok=True)
    _remove_stale_temps(folder)
    final = path_for(folder, step)
    tmp = f"{final}.{_host()}.{os.getpid()}.{secrets.token_hex(8)}{_TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_dir(folder)
    if keep_latest_k > 0:
        for old in list_steps(folder)[:-keep_latest_k]:
            try:
                os.remove(path_for(folder, old))
            except FileNotFoundError:
                pass  # another process sharing the folder removed it first
    return final


def _host():
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"


def _writer_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True


def _remove_stale_temps(folder):
    """Removes temporaries of interrupted saves: this host's whose process is
    gone, and any older than an hour (another host's dead writer)."""
    now = time.time()
    for path in glob.glob(os.path.join(folder, f"*{_TMP_SUFFIX}")):
        m = _TMP_NAME.search(path)
        try:
            old = now - os.path.getmtime(path) > _STALE_SECONDS
            dead = m is not None and m.group(1) == _host() and not _writer_alive(int(m.group(2)))
            if old or dead or m is None and now - os.path.getmtime(path) > 60:
                os.remove(path)
        except FileNotFoundError:
            pass  # finished (renamed) or removed by its writer meanwhile


def _fsync_dir(folder):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load(path, map_location=None):
    return torch.load(path, map_location=map_location, weights_only=False)


def load_latest(folder, map_location=None):
    """(step, state) of the newest readable checkpoint in `folder`, or
    (0, None) when there is none."""
    for step in reversed(list_steps(folder)):
        path = path_for(folder, step)
        try:
            return step, load(path, map_location)
        except Exception as e:  # a damaged file: say so, try the one before
            warnings.warn(f"checkpoint {path} cannot be read ({e}); trying an older one")
    return 0, None


# --- asynchronous saves (checkpoint.async_mode = "async") ---------------------------------

class PendingSave:
    """A save running on a thread; wait() returns its path (or raises its error)."""

    def __init__(self, thread, result, path):
        self._thread, self._result, self.path = thread, result, path

    def done(self):
        return not self._thread.is_alive()

    def wait(self):
        self._thread.join()
        if "error" in self._result:
            raise self._result["error"]
        return self.path


def stage(obj):
    """obj with every tensor copied to host memory: the copy the writer
    thread saves while the step loop updates the originals in place (a CPU
    tensor is cloned too)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return type(obj)((k, stage(v)) for k, v in obj.items()) if type(obj) is not dict \
            else {k: stage(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(stage(v) for v in obj)
    return obj


def save_async(state, folder, step, keep_latest_k=0):
    """save() on a thread, of a host copy of `state` taken now (the caller
    may go on training at once); returns a PendingSave."""
    import threading
    staged = stage(state)
    result = {}

    def write():
        try:
            result["path"] = save(staged, folder, step, keep_latest_k)
        except BaseException as e:  # noqa: BLE001 (raised again by wait())
            result["error"] = e
    thread = threading.Thread(target=write, name=f"checkpoint-step-{step}", daemon=True)
    thread.start()
    return PendingSave(thread, result, path_for(folder, step))
