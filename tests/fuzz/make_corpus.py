#!/usr/bin/python3
"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/<target>/) from the real inputs: the configs, the
.npy fixtures, what an implementation writes for `hla verify`, command lines from the README. Run from
anywhere with Debian's python3-numpy (/usr/bin/python3); commit what it writes. The fuzzers add what they find to build-fuzz/corpus/, not here."""
import io
import os
import shutil
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
corpus = os.path.join(here, "corpus")


def target(name):
    d = os.path.join(corpus, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


d = target("fuzz_rational")
for i, text in enumerate(["3/4", "0.99", "1e-6", "-2", "010/3", "1.5e3", " 7 ", "+.5", "5.", "1/0", "abc", "-0/7", "123456789012345678901234567890"]):
    write(d, f"seed{i:02d}", text)

d = target("fuzz_npy")
fixtures = os.path.join(root, "tests", "data", "npy")
for f in sorted(os.listdir(fixtures)):
    if f.endswith((".npy", ".npz")):
        shutil.copy(os.path.join(fixtures, f), os.path.join(d, f))

d = target("fuzz_sweep_config")
for f in sorted(os.listdir(os.path.join(root, "configs"))):
    if f.endswith(".toml"):
        shutil.copy(os.path.join(root, "configs", f), os.path.join(d, f))

# hla2 at n = 3, d = dv = 2 (the fuzz target's case): o (3, 2), state S, C, G (2, 2) and m, h (2,).
d = target("fuzz_verify_outcome")
rng = np.random.default_rng(1)
for flags in range(8):
    dt = np.float32 if flags & 1 else np.float64
    o = rng.standard_normal((3, 2)).astype(dt)
    state = [rng.standard_normal(s).astype(dt) for s in [(2, 2), (2, 2), (2,), (2, 2), (2,)]]
    grads = [rng.standard_normal((3, 2)).astype(dt) for _ in range(3)]
    files = [o] + state + grads
    write(d, f"flags{flags}", bytes([flags]) + b"\n--\n".join(npy_bytes(a) for a in files))
write(d, "wrong_shape", bytes([0]) + npy_bytes(np.zeros((2, 3))))
write(d, "wrong_dtype", bytes([1]) + npy_bytes(np.zeros((3, 2))))

d = target("fuzz_cli_run")
for i, line in enumerate([
        "--op hla2 --form serial --n 99999999999",
        "--op hla2 --form chunked",
        "--op hla2 --form chunked --variant paper",
        "--op ahla --form scan-blelloch --gamma 3/4 --normalized --eps 1e-6 --chunk 5 --threads 2",
        "--op hla2 --form serial --variant corrected --lambda 0.5 --scalar rational --n 8",
        "--op hla3 --form serial --gamma 0.5",
        "--scalar mpfr256 --n 4096 --d 64 --dv 64",
        "--op linear --form chunked --scalar float --shard 2/4",
        "--gamma 1.5",
        "--shard 0/3"]):
    write(d, f"seed{i:02d}", "\n".join(line.split()))
