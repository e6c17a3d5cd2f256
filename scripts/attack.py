#!/usr/bin/python3
"""An adversarial pass over every subcommand of `hla` and the Python module (issue 48, round four): the classes of
docs/hardening.md — sizes (huge, negative, zero, 1e20, hex, blanks, '+'), the environment the harness and its libraries
read (OMP_*, GOMP_*, OPENBLAS_*, GOTO_*, HLA_*, TMPDIR), FIFOs, symlinks, folders and devices where a file goes,
signals at each phase, concurrent runs on one output, malformed inputs — each run in a folder and TMPDIR of its own,
in a session of its own, with a time limit.

A case fails when `hla` hangs (past the limit), dies of a signal it was not sent, exits 70 (an internal error) or with
a code outside the case's (0 ok, 1 differs, 2 input or environment, 128 + a signal it was sent), prints a traceback or
more than one line of error, or leaves a file in TMPDIR, a temporary file beside an output or a process behind. An
input that should be refused and is not is listed as "accepted" (not a failure: some are readings, e.g. CLI11 reads
0x10 as 16). Prints one line per failing case and a summary; exit 1 when any failed.

Usage: scripts/attack.py [BUILD] [--only TEXT] [--list]   (BUILD: the build folder, default build)
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = 30  # seconds a case may take; past it, a hang
QUICK = ["--max-n", "16", "--d", "2", "--dv", "2", "--quiet", "--shrink-rounds", "0", "--no-diagnose"]
TINY = "name = 'tiny'\n[axes]\noperator = 'hla2'\nform = 'serial'\nscalar = 'double'\nn = [8]\nd = [2]\ndv = [2]\n"
SIZES = ["99999999999999999999", "-1", "0", "1e20", "0x10", " 5", "5 ", "+5", "", "nan", "1.5", "2147483648",
         "9223372036854775808", "-9223372036854775809", "4294967297", "1_000", "5\n", "\u0665"]
NUMBERS = ["nan", "inf", "-inf", "1e400", "1e-400", "-0", "1/0", "0/0", "-1", "2", "0x1p-1", " 0.5", "+0.5",
           "1" * 2000, "3/4/5", "1e99999999999", "", "0.5\n"]
REFUSE_SIZES = {"99999999999999999999", "-1", "1e20", "", "nan", "1.5", "9223372036854775808",
                "-9223372036854775809", "1_000", "\u0665"}


class Case:
    def __init__(self, name, argv, env=None, setup=None, codes=(0, 2), refuse=False, signal_at=None, limit=LIMIT,
                 outputs=(), python=None):
        self.name, self.argv, self.env, self.setup, self.codes = name, argv, env or {}, setup, set(codes)
        self.refuse, self.signal_at, self.limit, self.outputs, self.python = refuse, signal_at, limit, outputs, python


def fifo(path):
    os.mkfifo(path)


def symlink_to(target):
    return lambda path: os.symlink(target, path)


def folder(path):
    os.mkdir(path)


def text(data):
    def write(path):
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
    return write


# The odd things a path may be where a file is expected (each made at the path in the case's folder).
ODD_FILES = {"fifo": fifo, "folder": folder, "dev-zero": symlink_to("/dev/zero"), "dev-null": symlink_to("/dev/null"),
             "dangling": symlink_to("nowhere/x"), "loop": lambda p: os.symlink(os.path.basename(p), p),
             "proc": symlink_to("/proc/self/status"), "empty": text(""), "binary": text(bytes(range(256)) * 4)}


def cases(hla):
    out = []
    size_options = {"run": ["--n", "--d", "--dv", "--chunk", "--threads", "--seed"],
                    "check": ["--n", "--d", "--dv", "--seed"],
                    "mpi-bench": ["--n", "--d", "--dv", "--chunk", "--repeats"],
                    "verify": ["--max-n", "--d", "--dv", "--n-multiple", "--shrink-rounds", "--timeout", "--seed"],
                    "gpu-bench": ["--batch", "--heads", "--T", "--d", "--dv", "--chunk", "--reps", "--seed"],
                    "claims": ["--seed"]}
    base = {"run": ["run", "--n", "8"], "check": ["check", "--n", "4", "--d", "2", "--dv", "2"],
            "mpi-bench": ["mpi-bench", "--n", "64", "--d", "4", "--dv", "4", "--repeats", "1"],
            "verify": ["verify", "--op", "hla2", "--exec", "true", *QUICK],
            "gpu-bench": ["gpu-bench"], "claims": ["claims", "--id", "hla2.scan.masked", "--quick", "--out", "c"]}
    for cmd, options in size_options.items():
        for option in options:
            for value in SIZES:
                argv = [a for a in base[cmd]]
                if option in argv:
                    i = argv.index(option)
                    del argv[i:i + 2]
                seed = option == "--seed"  # 0 .. 2^64 - 1
                refuse = (value in REFUSE_SIZES and not (seed and value == "9223372036854775808")) or \
                    (value == "0" and not seed and option != "--shrink-rounds")
                out.append(Case(f"{cmd} {option}={value!r}", argv + [f"{option}={value}"], refuse=refuse,
                                codes=(0, 1, 2) if cmd == "verify" else (0, 2)))
    for cmd, options in {"run": ["--gamma", "--eps", "--ridge"], "verify": ["--gamma", "--eps", "--ridge"],
                         "gpu-bench": ["--gamma", "--eps", "--ridge", "--gates-from"]}.items():
        for option in options:
            for value in NUMBERS:
                argv = base[cmd] + (["--normalized"] if option == "--eps" else []) + [f"{option}={value}"]
                out.append(Case(f"{cmd} {option}={value!r}", argv, codes=(0, 1, 2) if cmd == "verify" else (0, 2),
                                refuse=value in ("nan", "inf", "-inf", "1/0", "0/0", "-1", "3/4/5", "")))
    # The environment, on every subcommand that starts quickly.
    env_values = {
        "OMP_NUM_THREADS": [" 100000", "+100000", "0", "-1", "abc", ",".join(["1"] * 50), "99999999999999999999",
                            "1e3", "4 4", "2,"],
        "OMP_STACKSIZE": ["100G", "-1", "abc", "0", "1T", "99999999999999999999K", " 4M", "4 M",
                          "18446744073709551615B"],
        "GOMP_STACKSIZE": ["100G", "99999999999999999999"],
        "OMP_THREAD_LIMIT": ["0", "-1", "abc", "99999999999999999999", "1"],
        "OMP_DYNAMIC": ["maybe"], "OMP_PROC_BIND": ["spread,close,xx", "true"],
        "OMP_PLACES": ["{0:100000}", "garbage", "cores(99999999)", "{99999}"],
        "OMP_MAX_ACTIVE_LEVELS": ["-1", "99999999999999999999"], "OMP_WAIT_POLICY": ["x"],
        "GOMP_SPINCOUNT": ["-1", "1e99", "99999999999999999999", "infinite"], "OMP_SCHEDULE": ["dynamic,-5", "x"],
        "OMP_DEFAULT_DEVICE": ["-1"], "OMP_TARGET_OFFLOAD": ["MANDATORY"], "OMP_DISPLAY_ENV": ["verbose"],
        "OPENBLAS_NUM_THREADS": [" 100000", "0", "-1", "abc"], "GOTO_NUM_THREADS": ["99999999999999999999"],
        "OPENBLAS_CORETYPE": ["NOPE"], "OPENBLAS_MAIN_FREE": ["1"], "OPENBLAS_VERBOSE": ["2"],
        "LIBXSMM_VERBOSE": ["-1"], "LIBXSMM_TARGET": ["nope"], "HLA_NO_CUDA": ["1", "0", "x"],
        "HLA_CUDA_LIBRARY": ["/nonexistent.so", "/dev/zero", "/proc/self/status"],
        "TMPDIR": ["/nonexistent", "/proc", "relative", "/dev/null"],
        "OMPI_COMM_WORLD_SIZE": ["4", "-1", "abc"], "PMI_SIZE": ["2"], "OMPI_COMM_WORLD_RANK": ["3"],
    }
    env_commands = [base["run"], ["list"], base["check"], base["verify"], ["sweep", "tiny.toml", "--out", "s"],
                    base["mpi-bench"], ["gpu-bench"]]
    for name, values in env_values.items():
        for value in values:
            for argv in env_commands:
                tmp_odd = name == "TMPDIR"
                out.append(Case(f"{name}={value!r} {' '.join(argv[:1])}", argv, env={name: value},
                                codes=(0, 1, 2) if argv[0] == "verify" else (0, 2),
                                setup=(lambda w: text(TINY)(os.path.join(w, "tiny.toml"))), outputs=("s",),
                                limit=90 if argv[0] == "check" else LIMIT) if not tmp_odd else
                           Case(f"{name}={value!r} {' '.join(argv[:1])}", argv, env={name: value, "_keep_tmp": "1"},
                                codes=(0, 1, 2) if argv[0] == "verify" else (0, 2),
                                setup=(lambda w: text(TINY)(os.path.join(w, "tiny.toml")))))
    # Files: odd things where a file goes.
    for kind, make in ODD_FILES.items():
        def at(name, make=make):
            return lambda w: make(os.path.join(w, name))
        out += [
            Case(f"sweep config is {kind}", ["sweep", "x.toml", "--out", "s"], setup=at("x.toml")),
            Case(f"sweep --out is {kind}", ["sweep", "tiny.toml", "--out", "s"],
                 setup=lambda w, make=make: (text(TINY)(os.path.join(w, "tiny.toml")), make(os.path.join(w, "s")))),
            Case(f"sweep --out/points.csv is {kind}", ["sweep", "tiny.toml", "--out", "s"],
                 setup=lambda w, make=make: (text(TINY)(os.path.join(w, "tiny.toml")), os.mkdir(os.path.join(w, "s")),
                                             make(os.path.join(w, "s", "points.csv")))),
            Case(f"sweep --out/refcache is {kind}", ["sweep", "tiny.toml", "--out", "s"],
                 setup=lambda w, make=make: (text(TINY)(os.path.join(w, "tiny.toml")), os.mkdir(os.path.join(w, "s")),
                                             make(os.path.join(w, "s", "refcache")))),
            Case(f"sweep --out/.hla-lock is {kind}", ["sweep", "tiny.toml", "--out", "s"],
                 setup=lambda w, make=make: (text(TINY)(os.path.join(w, "tiny.toml")), os.mkdir(os.path.join(w, "s")),
                                             make(os.path.join(w, "s", ".hla-lock")))),
            Case(f"merge input is {kind}", ["merge", "m", "--out", "o.csv"], setup=at("m")),
            Case(f"merge input points.csv is {kind}", ["merge", "m", "--out", "o.csv"],
                 setup=lambda w, make=make: (os.mkdir(os.path.join(w, "m")), make(os.path.join(w, "m", "points.csv")))),
            Case(f"merge --out is {kind}", ["merge", "m", "--out", "o.csv"],
                 setup=lambda w, make=make: (shutil.copytree(os.path.join(ROOT, "results", "complexity"),
                                                             os.path.join(w, "m")), make(os.path.join(w, "o.csv")))),
            Case(f"merge --out's jsonl is {kind}", ["merge", "m", "--out", "o.csv"],
                 setup=lambda w, make=make: (shutil.copytree(os.path.join(ROOT, "results", "complexity"),
                                                             os.path.join(w, "m")), make(os.path.join(w, "o.jsonl")))),
            Case(f"claims --out is {kind}", ["claims", "--id", "hla2.scan.masked", "--quick", "--out", "c"],
                 setup=at("c"), limit=120),
            Case(f"claims --out/claims.json is {kind}", ["claims", "--id", "hla2.scan.masked", "--quick", "--out", "c"],
                 setup=lambda w, make=make: (os.mkdir(os.path.join(w, "c")), make(os.path.join(w, "c", "claims.json"))),
                 limit=120),
            Case(f"claims --out/claims-partial.md is {kind}",
                 ["claims", "--id", "hla2.scan.masked", "--quick", "--out", "c"],
                 setup=lambda w, make=make: (os.mkdir(os.path.join(w, "c")),
                                             make(os.path.join(w, "c", "claims-partial.md"))), limit=120),
            Case(f"verify --json is {kind}", ["verify", "--op", "hla2", "--exec", "true", *QUICK, "--json", "r.json"],
                 setup=at("r.json"), codes=(0, 1, 2)),
            Case(f"verify --parts file is {kind}", ["verify", "--op", "hla2", "--combine", "--exec", "true",
                                                    "--parts", "@p.json", "--quiet"], setup=at("p.json"),
                 codes=(0, 1, 2)),
        ]
        for option in ("--q", "--k", "--v", "--o", "--npz", "--gamma-npy"):
            argv = ["verify", "--op", "hla2", "--quiet", "--no-diagnose"]
            if option == "--npz":
                argv += ["--npz", "f"]
            else:
                argv += [o for x in ("--q", "--k", "--v", "--o") for o in (x, "f" if x == option else "ok.npy")]
                if option == "--gamma-npy":
                    argv += ["--gates", "--gamma-npy", "f"]
            out.append(Case(f"verify {option} is {kind}", argv, codes=(0, 1, 2),
                            setup=lambda w, make=make: (make(os.path.join(w, "f")), ok_npy(w))))
        out.append(Case(f"--exec's command is {kind}", ["verify", "--op", "hla2", "--exec", "./cmd", *QUICK],
                        setup=at("cmd"), codes=(0, 1, 2)))
    # Malformed JSON where the harness reads JSON.
    for name, data in {"deep": "[" * 100000, "deep-object": '{"a":' * 20000, "huge-number": "1" * 100000,
                       "nul": '{"a\u0000": 1}', "not-utf8": b'{"\xff": 1}', "nan": '{"a": NaN}',
                       "claims-not-list": '{"claims": 5}', "ids": '{"claims": [{"id": 5, "seconds": "x"}]}'}.items():
        out.append(Case(f"claims: previous claims.json {name}",
                        ["claims", "--id", "hla2.scan.masked", "--quick", "--out", "c"], limit=120,
                        setup=lambda w, data=data: (os.mkdir(os.path.join(w, "c")),
                                                    text(data)(os.path.join(w, "c", "claims.json")))))
        parts = data if isinstance(data, str) and "\0" not in data else "x"  # argv holds no NUL
        argv = ["verify", "--op", "hla2", "--combine", "--exec", "true", "--parts", parts, "--quiet", "--d", "2"]
        out.append(Case(f"verify --parts {name}", argv, codes=(0, 1, 2)))
    # Signals at each phase of a session, and of a sweep and a claims run (their outputs must stay whole).
    slow = f"sleep 0.5; {sys.executable} " + os.path.join(ROOT, "tests", "verify_impls", "impls.py") + " hla2"
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        for at_s in (0.01, 0.3, 1.0, 2.5):
            out.append(Case(f"verify {sig.name} at {at_s} s", ["verify", "--op", "hla2", "--exec", slow, *QUICK],
                            signal_at=(sig, at_s), codes=(0, 1, 2, 128 + sig)))
            out.append(Case(f"sweep {sig.name} at {at_s} s", ["sweep", "tiny.toml", "--out", "s"], outputs=("s",),
                            setup=lambda w: text(TINY)(os.path.join(w, "tiny.toml")), signal_at=(sig, at_s),
                            codes=(0, 2, 128 + sig, -sig)))
            out.append(Case(f"claims {sig.name} at {at_s} s",
                            ["claims", "--id", "hla2.scan.masked", "--quick", "--out", "c"], outputs=("c",),
                            signal_at=(sig, at_s), codes=(0, 2, 128 + sig, -sig), limit=120))
    # Concurrent runs on one output.
    out.append(Case("two sweeps on one --out", ["sweep", "tiny.toml", "--out", "s"], outputs=("s",),
                    setup=lambda w: text(TINY)(os.path.join(w, "tiny.toml")), python="twice"))
    out.append(Case("two merges on one --out", ["merge", "m", "--out", "o.csv"], python="twice",
                    setup=lambda w: shutil.copytree(os.path.join(ROOT, "results", "complexity"),
                                                    os.path.join(w, "m"))))
    out.append(Case("two claims on one --out", ["claims", "--id", "hla2.scan.masked", "--quick", "--out", "c"],
                    python="twice", outputs=("c",), limit=120))
    argv = ["verify", "--op", "hla2", "--exec", "true", *QUICK, "--json", "r.json"]
    out.append(Case("two verify on one --json", argv, python="twice", codes=(0, 1, 2)))
    # The module.
    for call in MODULE_CALLS:  # a function that ends the process (os._exit(3), sys.exit(3)) ends it: exit 3
        out.append(Case(f"module: {call}", [], python=call, codes=(0, 3) if "exit(3)" in call else (0,)))
    return out


MODULE_CALLS = [
    "h.state_parts('hla2', 2**70, 2)", "h.state_parts('hla2', True, 2)", "h.state_parts('', 2, 2)",
    "h.state_parts('hla2\\0', 2, 2)", "h.state_parts('hla2', 1e20, 2)", "h.state_parts('hla2', '3', 2)",
    "h.reference('hla2', np.zeros((0, 2)), np.zeros((0, 2)), np.zeros((0, 2)))",
    "h.reference('hla2', np.zeros((2,)), np.zeros((2,)), np.zeros((2,)))",
    "h.reference('hla2', np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), np.zeros((2, 2, 2)))",
    "h.reference('hla2', np.zeros((2, 2)), np.zeros((3, 2)), np.zeros((2, 2)))",
    "h.reference('hla2', np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), gamma=float('nan'))",
    "h.reference('hla2', np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), gamma='1/0')",
    "h.reference('hla2', np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), gamma='1' * 5000)",
    "h.reference('hla2', np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), eps=-1, normalized=True)",
    "h.reference('hla2', np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), precision='nope')",
    "h.reference('hla2', np.full((2, 2), 1e308), np.full((2, 2), 1e308), np.ones((2, 2)), precision='float64')",
    "h.reference('hla2', np.full((2, 2), 1e-320), np.ones((2, 2)), np.ones((2, 2)))",
    "h.reference('hla2', np.ones((1, 5000)), np.ones((1, 5000)), np.ones((1, 2)))",
    "h.reference('hla2', np.ones((100000, 2)), np.ones((100000, 2)), np.ones((100000, 2)), precision='exact')",
    "h.reference('hla2', np.array([['a']]), np.ones((1, 1)), np.ones((1, 1)))",
    "h.reference('hla2', np.ones((2, 2), dtype=complex), np.ones((2, 2)), np.ones((2, 2)))",
    "h.reference('hla2', np.ones((4, 4))[:, ::2], np.ones((4, 2)), np.ones((4, 2)))",
    "h.reference('softmax', np.full((2, 2), 800.0), np.full((2, 2), 800.0), np.ones((2, 2)), precision='float64')",
    "h.verify(lambda q, k, v, **o: v, 'hla2', max_n=-1)", "h.verify(lambda q, k, v, **o: v, 'hla2', max_n=2**40)",
    "h.verify(lambda q, k, v, **o: v, 'hla2', d=0)", "h.verify(lambda q, k, v, **o: v, 'hla2', seed=-1)",
    "h.verify(lambda q, k, v, **o: v, 'hla2', timeout=float('nan'))",
    "h.verify(lambda q, k, v, **o: v, 'hla2', n_multiple=0)",
    "h.verify(lambda q, k, v, **o: v, 'hla2', n_multiple=2**62)",
    "h.verify(lambda q, k, v, **o: v, 'hla2', gate_range=(2, 3), gates=True)",
    "h.verify(lambda q, k, v, **o: v, 'hla2', gate_range=(float('nan'), 1), gates=True)",
    "h.verify(lambda q, k, v, **o: v, 'hla2', shrink_rounds=-5, max_n=8, d=2, dv=2)",
    "h.verify(lambda q, k, v, **o: v, 'hla2', dtype='float16')",
    "h.verify(lambda q, k, v, **o: v, 'hla2', layout='nope')",
    "h.verify(lambda q, k, v, **o: v, 'hla2', precision='fp8')",
    "h.verify(lambda q, k, v, **o: None, 'hla2', max_n=8, d=2, dv=2)",
    "h.verify(lambda q, k, v, **o: np.zeros((10**6, 10**3)), 'hla2', max_n=8, d=2, dv=2)",
    "h.verify(lambda q, k, v, **o: 1 / 0, 'hla2', max_n=8, d=2, dv=2)",
    "h.verify(lambda q, k, v, **o: os._exit(3), 'hla2', max_n=8, d=2, dv=2)",
    "h.verify(lambda q, k, v, **o: sys.exit(3), 'hla2', max_n=8, d=2, dv=2)",
    "h.verify(lambda q, k, v, **o: v.astype(object), 'hla2', max_n=8, d=2, dv=2)",
    "h.verify_combine(lambda *a, **k: {}, lambda a, b, **k: {}, 'hla2', d=-1)",
    "h.verify_combine(lambda *a, **k: {}, lambda a, b, **k: {}, 'hla2', parts={'a': 5})",
    "h.verify_combine(lambda *a, **k: {}, lambda a, b, **k: {}, 'hla2', parts=[1])",
    "h.verify_combine(lambda *a, **k: None, lambda a, b, **k: None, 'hla2', d=2, dv=2)",
    "h.verify_combine(lambda *a, **k: {'S': 1}, lambda a, b, **k: {'S': 1}, 'hla2', d=2, dv=2)",
]


def ok_npy(w):
    import numpy as np
    np.save(os.path.join(w, "ok.npy"), np.ones((4, 2)))


def processes_in_session(sid):
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                left.append(int(entry))
    return left


def temporaries(path):
    found = []
    for base, dirs, files in os.walk(path):
        found += [os.path.join(base, f) for f in files + dirs if ".tmp" in f or f.startswith(".hla-tmp")]
    return found


def run_case(hla, build, case):
    work = tempfile.mkdtemp(prefix="hla-attack-")
    tmp = os.path.join(work, "tmp")
    os.mkdir(tmp)
    env = {**os.environ, "TMPDIR": tmp, "PYTHONPATH": os.path.join(build, "python"), **case.env}
    keep_tmp = env.pop("_keep_tmp", None)
    problems = []
    try:
        if case.setup:
            case.setup(work)
        t0 = time.time()
        if case.python and case.python != "twice":
            code = f"import os, sys\nimport numpy as np\nimport hla_harness as h\ntry:\n    {case.python}\n" \
                   "except (ValueError, TypeError, TimeoutError, ArithmeticError) as e:\n    print('refused', e)\n"
            procs = [subprocess.Popen([sys.executable, "-c", code], cwd=work, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, start_new_session=True)]
        else:
            n = 2 if case.python == "twice" else 1
            procs = [subprocess.Popen([hla, *case.argv], cwd=work, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, start_new_session=True) for _ in range(n)]
        if case.signal_at:
            time.sleep(case.signal_at[1])
            for p in procs:
                if p.poll() is None:
                    p.send_signal(case.signal_at[0])
        results = []
        for p in procs:
            try:
                o, e = p.communicate(timeout=max(1, case.limit - (time.time() - t0)))
                results.append((p.returncode, o, e))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                o, e = p.communicate()
                problems.append(f"hang (> {case.limit} s)")
                results.append((None, o, e))
        seconds = time.time() - t0
        time.sleep(0.2)
        for p in procs:
            left = processes_in_session(p.pid)
            if left:
                problems.append(f"left {len(left)} processes")
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        codes = set(case.codes)
        accepted = False
        for rc, o, e in results:
            if rc is None:
                continue
            err = e.decode(errors="replace")
            if rc < 0 and (not case.signal_at or -rc != case.signal_at[0]):
                problems.append(f"died of signal {-rc}")
            elif rc == 70:
                problems.append("exit 70")
            elif rc not in codes and not (case.signal_at and rc in (128 + case.signal_at[0], -case.signal_at[0])):
                problems.append(f"exit {rc}")
            if "Traceback" in err or "Traceback" in o.decode(errors="replace"):
                problems.append("traceback")
            # Progress lines (a sweep's, the ledger's) and what a library was asked to print are not the error.
            lines = [x for x in err.strip().splitlines()
                     if x and not x.startswith(("Run with --help", "libgomp:", "sweep ", "[claims]", "merge"))]
            chatty = {"OMP_DISPLAY_ENV", "OPENBLAS_VERBOSE"} & set(case.env)
            if rc == 2 and len(lines) > 1 and not case.python and not chatty and "verdict" not in o.decode("latin-1"):
                problems.append(f"{len(lines)} lines of error")
            if case.refuse and rc == 0:
                accepted = True
        if not keep_tmp and os.path.isdir(tmp) and os.listdir(tmp):
            problems.append(f"TMPDIR left: {os.listdir(tmp)[:3]}")
        for out in case.outputs:
            t = temporaries(os.path.join(work, out))
            if t:
                problems.append(f"temporaries left: {[os.path.relpath(x, work) for x in t[:3]]}")
        summary = " | ".join(f"{rc}: {e.decode(errors='replace').strip().splitlines()[-1][:150] if e.strip() else ''}"
                             for rc, o, e in results)
        return problems, accepted, seconds, summary
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--from", dest="start", default="", help="start at the first case whose name holds this")
    ap.add_argument("--json")
    args = ap.parse_args()
    hla = os.path.join(os.path.abspath(args.build), "bin", "hla")
    chosen = [c for c in cases(hla) if args.only in c.name]
    if args.start:
        chosen = chosen[next(i for i, c in enumerate(chosen) if args.start in c.name):]
    if args.list:
        print("\n".join(c.name for c in chosen))
        return
    failed, accepted, report = 0, 0, []
    t0 = time.time()
    for c in chosen:
        problems, acc, seconds, summary = run_case(hla, os.path.abspath(args.build), c)
        report.append({"case": c.name, "problems": problems, "accepted": acc, "seconds": round(seconds, 2),
                       "summary": summary})
        if problems:
            failed += 1
            print(f"FAIL {c.name}: {'; '.join(problems)} [{summary}]", flush=True)
        elif acc:
            accepted += 1
            print(f"accepted {c.name} [{summary}]", flush=True)
    print(f"attack: {len(chosen)} cases, {failed} failed, {accepted} accepted, {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
