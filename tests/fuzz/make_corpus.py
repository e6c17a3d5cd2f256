#!/usr/bin/python3
"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/<target>/) from the real inputs: the configs, the
.npy fixtures, what an implementation writes for `hla verify`, command lines from the README. Run from
anywhere with Debian's python3-numpy (/usr/bin/python3); commit what it writes. The fuzzers add what they find to
build-fuzz/corpus/, not here."""
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
for i, text in enumerate(["3/4", "0.99", "1e-6", "-2", "010/3", "1.5e3", " 7 ", "+.5", "5.", "1/0", "abc", "-0/7",
                          "123456789012345678901234567890"]):
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

# Trees a command leaves (fuzz_exec_outputs: 4-byte operations what, where, a, b; paths and targets as in
# tests/fuzz/targets.hpp). Issue 27's attacks: symlink loops, a sparse 16 GiB o.npy, FIFOs, read-only folders.
d = target("fuzz_exec_outputs")
MKDIR, SYMLINK, NPY, SPARSE, FIFO, CHMOD, REMOVE = range(7)
O, STATE, S, C, M, G, H, DQ, X, XO, STATEX, DSTATE = range(12)
for name, flags, ops in [
        ("right_o", 0, [(NPY, O, 3, 2)]),
        ("right_state", 2, [(NPY, O, 3, 2), (MKDIR, STATE, 0, 0), (NPY, S, 2, 2), (NPY, C, 2, 2), (NPY, M, 2, 0),
                            (NPY, G, 2, 2), (NPY, H, 2, 0)]),
        ("o_loop", 0, [(SYMLINK, O, 7, 0)]),
        ("state_out_loop", 2, [(NPY, O, 3, 2), (SYMLINK, STATE, 7, 0)]),
        ("o_to_dev_zero", 0, [(SYMLINK, O, 5, 0)]),
        ("o_dangling", 0, [(SYMLINK, O, 6, 0)]),
        ("state_out_to_parent", 2, [(NPY, O, 3, 2), (SYMLINK, STATE, 2, 0)]),
        ("sparse_16gib_o", 0, [(SPARSE, O, 30, 34)]),
        ("sparse_right_shape_long", 0, [(SPARSE, O, 1, 31)]),
        ("o_fifo", 0, [(FIFO, O, 0, 0)]),
        ("o_directory", 0, [(MKDIR, O, 0, 0)]),
        ("read_only_case", 2, [(NPY, O, 3, 2), (MKDIR, STATE, 0, 0), (NPY, S, 2, 2), (CHMOD, STATE, 0o500 & 0xff, 1),
                               (MKDIR, X, 0, 0), (SYMLINK, XO, 1, 0), (CHMOD, X, 0, 0)]),
        ("float32_vector", 1, [(NPY, O, 3, 0x82)])]:
    write(d, name, bytes([flags]) + b"".join(bytes(op) for op in ops))

# Sweep configs and command lines issue 27 found breaking (tests/data/fuzz/ keeps the crashing ones).
d = os.path.join(corpus, "fuzz_sweep_config")
write(d, "chunk_above_int", "[axes]\noperator = 'hla2'\nform = 'chunked'\nn = 8\nchunk = 4294967296\n")
write(d, "nul_in_name", 'name = "a\\u0000b"\n[axes]\noperator = "hla2"\nform = "serial"\nn = 8\n')
write(d, "deep_inline_table", "x = " + "{a = " * 200 + "1" + "}" * 200 + "\n")

d = target("fuzz_cli_run")
for i, line in enumerate([
        "--op hla2 --form serial --n 99999999999",
        "--op hla2 --form chunked",
        "--op hla2 --form chunked --variant paper",
        "--op ahla --form scan-blelloch --gamma 3/4 --normalized --eps 1e-6 --chunk 5 --threads 2",
        "--op hla2 --form serial --variant corrected --ridge 0.5 --scalar rational --n 8",
        "--op hla3 --form serial --gamma 0.5",
        "--scalar mpfr256 --n 4096 --d 64 --dv 64",
        "--op linear --form chunked --scalar float --shard 2/4",
        "--gamma 1.5",
        "--shard 0/3"]):
    write(d, f"seed{i:02d}", "\n".join(line.split()))
# issue 27: threads the machine cannot run, a seed beyond 64 bits, a state that cannot fit
for i, line in enumerate(["--op hla2 --form chunked --threads 65536", "--op hla2 --form chunked --threads 33000",
                          "--seed 18446744073709551616", "--d 100000 --n 4"], start=10):
    write(d, f"seed{i:02d}", "\n".join(line.split()))
# issue 31: per-token gates on a decode kernel across a block boundary (a form that takes them), and with --gamma
# (refused: the decay is the gates')
for i, line in enumerate(["--op hla2 --form decode --variant corrected --gates strength:0.5 --normalized --eps 1/8"
                          " --n 130",
                          "--op linear --form decode --gates range:0.5,1 --gamma 3/4"], start=14):
    write(d, f"seed{i:02d}", "\n".join(line.split()))

# `hla merge`'s CSV reader (issue 48): a committed shard's first rows, and the rows that ended it as exit 70 before
# (an index that is not one, a byte that is not UTF-8).
d = target("fuzz_merge_csv")
with open(os.path.join(root, "results", "complexity", "points.csv"), "rb") as f:
    header, first, second = f.read().split(b"\n")[:3]
write(d, "two_rows", header + b"\n" + first + b"\n" + second + b"\n")
for name, index in (("index_abc", b"abc"), ("index_empty", b""), ("index_1e20", b"1e20")):
    write(d, name, header + b"\n" + index + first[first.index(b","):] + b"\n")
write(d, "not_utf8", header + b"\n" + first.replace(b",", b",\xff", 2) + b"\n")
write(d, "quoted", header + b'\n"' + first.replace(b",", b'","') + b'"\n')

# A sweep's reference cache (issue 48): a byte for the point (bits 0-1 n - 1, bits 2-3 dv - 1, bit 4 streaming), then
# the file: right ones (literal and proxy, with and without the bound), and the forgeries that read past the end
# (1 x 1), allocated 10^9 x 10^9, or held what is not a number.
d = target("fuzz_reference_cache")


def cache(n, dv, streaming, method=b"literal", abs_rows=None, head=None, values=None):
    cols = dv + (1 if streaming else 0)
    abs_rows = n if abs_rows is None else abs_rows
    head = head or b"%d %d %d %d" % (n, cols, abs_rows, cols if abs_rows else 0)
    if values is None:
        num = np.zeros((n * cols, 5))
        num[:, 0] = rng.standard_normal(n * cols)
        num[:, 1] = num[:, 0] * 2.0 ** -60
        values = num.tobytes() + np.abs(rng.standard_normal(abs_rows * cols if abs_rows else 0)).tobytes()
    shape = (n - 1) | (dv - 1) << 2 | (16 if streaming else 0)
    return bytes([shape]) + b"HLAREF1\n" + method + b"\n" + (b"hla2-abs/reference" if abs_rows else b"") + b"\n" \
        + head + b"\n" + values


write(d, "literal_3x2", cache(3, 2, True))
write(d, "proxy_4x1", cache(4, 1, True, method=b"mpfr-proxy:serial/paper"))
write(d, "softmax_2x3_no_bound", cache(2, 3, False, abs_rows=0))
write(d, "proxy_for_softmax", cache(2, 3, False, method=b"mpfr-proxy:serial/paper"))
write(d, "header_1x1", cache(3, 2, True, head=b"1 1 0 0"))
write(d, "header_1e9", cache(3, 2, True, head=b"1000000000 1000000000 0 0"))
write(d, "header_negative", cache(3, 2, True, head=b"-3 -3 0 0"))
write(d, "torn", cache(3, 2, True)[:-9])
write(d, "nan", cache(1, 1, True, values=np.full(14, np.nan).tobytes()))
write(d, "wide_parts", cache(1, 1, False, abs_rows=0, values=np.array([1e300, 1e-300, 1.0, 0.0, 5e-324]).tobytes()))

# HLA_BENCH_THREADS (make bench THREADS=...): lists right and wrong, the size classes of issue 48.
d = target("fuzz_bench_threads")
for i, text in enumerate(["1 2", "1 2 4 8 16", " 16\t4 1\n2 ", "1024", "1025", "0", "-1", "+2", "1e20", "0x10",
                          "99999999999999999999", "1 2 1", "2,4", ""]):
    write(d, f"seed{i:02d}", text)
