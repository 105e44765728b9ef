"""The persistent cache is code this process runs: nobody but its user can
choose what it loads.

- the poisoning reproducer: exp's entry rewritten with neg's compiled payload
  and every checksum a reader could recompute (here: a SHA-256 of the file,
  and an HMAC under a guessed key) is refused and recompiled, so exp stays
  exp; the same forgery made with the user's real key does load, which shows
  the payload swap is real and the refusal is the key's doing;
- a directory with mode 0777 is refused with a warning, and the cache is off;
- the directory and the key file are created 0700 / 0600;
- a FIFO in place of an entry neither hangs the process nor is read.

Entry format (disk_cache.c, version 2): 96-byte header (magic, version,
header size, key, environment hash, text length, payload length at 56, tag
at 64), then the StableHLO text, then the payload; tag = HMAC-SHA256(key
file, header[0:64] + text + payload)."""
import hashlib
import hmac
import json
import os
import stat
import struct
import subprocess
import sys
import textwrap



PROGRAM = textwrap.dedent("""
    import json, sys, torch, torchtpu
    x = torch.tensor([0.5, 1.0, 2.0], device="tpu")
    ops = sys.argv[1].split(",")
    out = {op: getattr(torch, op)(x).cpu().tolist() for op in ops}
    out.update({k: v for k, v in torch.tpu._get_cache_stats().items() if k != "entries"})
    print("RESULT " + json.dumps(out))
""")


def run(cache_dir, ops="exp,neg", timeout=180):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache_dir))
    env.pop("TORCHTPU_EXPLAIN_RECOMPILES", None)
    p = subprocess.run([sys.executable, "-W", "always", "-c", PROGRAM, ops], env=env,
                       text=True, capture_output=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), p.stderr


def read_entry(path):
    data = open(path, "rb").read()
    assert data[:8] == b"TTPUEXE\0"
    version, header = struct.unpack_from("<II", data, 8)
    assert (version, header) == (2, 96)
    text_len, payload_len = struct.unpack_from("<QQ", data, 48)
    text = data[96:96 + text_len]
    payload = data[96 + text_len:]
    assert len(payload) == payload_len
    return data[:64], text, payload


def entry_of(cache_dir, marker):
    for name in os.listdir(cache_dir):
        if name.endswith(".ttexe"):
            _, text, _ = read_entry(os.path.join(cache_dir, name))
            if marker in text:
                return os.path.join(cache_dir, name)
    raise AssertionError(f"no entry whose text has {marker!r}")


def forge(exp_path, neg_path, key):
    """exp's header and text with neg's payload; the payload length fixed and
    the tag recomputed under `key` (None: a plain SHA-256 of the content)."""
    head, text, _ = read_entry(exp_path)
    _, _, payload = read_entry(neg_path)
    head = head[:56] + struct.pack("<Q", len(payload))
    body = head + text + payload
    tag = hashlib.sha256(body).digest() if key is None else hmac.new(key, body, "sha256").digest()
    with open(exp_path, "wb") as f:
        f.write(head + tag + text + payload)


def test_poisoned_entry_is_refused_and_recompiled(tmp_path):
    first, _ = run(tmp_path)
    assert first["compiles"] == 2 and first["disk_writes"] == 2
    want_exp, want_neg = first["exp"], first["neg"]
    exp_path = entry_of(tmp_path, b"stablehlo.exponential")
    neg_path = entry_of(tmp_path, b"stablehlo.negate")

    for guessed in (None, b"\0" * 32, b"torchtpu"):
        forge(exp_path, neg_path, guessed)
        r, _ = run(tmp_path, "exp")
        assert r["exp"] == want_exp, "a forged entry was run"
        assert r["disk_rejected"] == 1 and r["compiles"] == 1

    # The same forgery with the user's key loads: neg's code under exp's name.
    key = open(os.path.join(tmp_path, ".ttkey"), "rb").read()
    forge(exp_path, neg_path, key)
    r, _ = run(tmp_path, "exp")
    assert r["disk_hits"] == 1 and r["exp"] == want_neg


def test_modes_of_directory_and_key(tmp_path):
    cache = tmp_path / "a" / "cache"
    r, _ = run(cache, "exp")
    assert r["disk_writes"] == 1
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    key = cache / ".ttkey"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and key.stat().st_size == 32
    for name in os.listdir(cache):
        if name.endswith(".ttexe"):
            assert stat.S_IMODE(os.stat(cache / name).st_mode) & 0o022 == 0


def test_world_writable_directory_is_refused_with_a_warning(tmp_path):
    cache = tmp_path / "cache"
    run(cache, "exp")
    os.chmod(cache, 0o777)
    r, err = run(cache, "exp")
    assert "persistent compilation cache off" in err and "writable by others" in err
    assert "0777" in err
    assert r["disk_hits"] == 0 and r["disk_writes"] == 0 and r["compiles"] == 1
    os.chmod(cache, 0o700)
    r, err = run(cache, "exp")
    assert r["disk_hits"] == 1, err


def test_unusable_directory_warns(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r, err = run(blocker / "cache", "exp")
    assert "persistent compilation cache off" in err and "a-file" in err
    assert r["compiles"] == 1 and r["disk_writes"] == 0


def test_fifo_in_place_of_an_entry_does_not_hang(tmp_path):
    run(tmp_path, "exp")
    entry = entry_of(tmp_path, b"stablehlo.exponential")
    os.remove(entry)
    os.mkfifo(entry)
    r, err = run(tmp_path, "exp", timeout=120)  # a blocking open would never return
    assert r["disk_rejected"] == 1 and r["compiles"] == 1
    assert "not a regular file" in err
    assert os.path.isfile(entry) and not stat.S_ISFIFO(os.stat(entry).st_mode)  # rewritten
