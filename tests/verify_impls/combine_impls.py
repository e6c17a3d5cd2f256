"""Outside scan operators for `hla verify --combine`: a segment summary and a combine, written as a user of a
chunk-parallel kernel would (NumPy), right and wrong in the ways the paper's own printed formulas are.

As a command:   python3 combine_impls.py <name> DIR      (cases of kind "segment" and "combine")
As callables:   combine_impls.callables(<name>) -> (segment, combine) for hla_harness.verify_combine
Names: hla2, hla2:paper (§4.2's printed G = ρB GA + ...), hla2:no-cross (the S_B C_A term dropped),
hla2:renamed (the user's own part names, with parts.json), hla2:no-rho (ρ from the token counts),
hla2:bad-identity, hla2:float32, hla2:undecayed (ρ ignored: exact at γ = 1 only), linear, ahla, ahla:paper (R
attenuated), hla3.
"""
import json
import os
import sys

import numpy as np


def hla2_token(q, k, v, g):
    d, dv = q.size, v.size
    return dict(S=np.outer(k, k), C=np.outer(q, v), m=q.copy(), G=np.zeros((d, dv)), h=np.zeros(d), rho=np.array(g))


def hla2_combine(A, B, variant=""):
    b = 1.0 if variant == "undecayed" else B["rho"] if "rho" in B else None
    bCA, bmA = b * A["C"], b * A["m"]
    keep = b if variant == "paper" else b * b
    cross = 0 if variant == "no-cross" else 1
    return dict(S=b * A["S"] + B["S"], C=bCA + B["C"], m=bmA + B["m"],
                G=keep * A["G"] + B["G"] + cross * B["S"] @ bCA, h=keep * A["h"] + B["h"] + cross * B["S"] @ bmA,
                rho=np.array(A["rho"] * B["rho"]))


def linear_token(q, k, v, g):
    return dict(S=np.outer(k, v), z=k.copy(), rho=np.array(g))


def linear_combine(A, B, variant=""):
    b = B["rho"]
    return dict(S=b * A["S"] + B["S"], z=b * A["z"] + B["z"], rho=np.array(A["rho"] * b))


def ahla_token(q, k, v, g):
    return dict(P=np.outer(k, v), m=k.copy(), E=np.outer(k, (q @ k) * v), n=k * (q @ k), R=np.outer(k, q),
                rho=np.array(g))


def ahla_combine(A, B, variant=""):
    b = B["rho"]
    bPA, bmA = b * A["P"], b * A["m"]
    return dict(P=bPA + B["P"], m=bmA + B["m"], E=b * A["E"] + B["E"] + B["R"] @ bPA,
                n=b * A["n"] + B["n"] + B["R"] @ bmA,
                R=(b * A["R"] if variant == "paper" else A["R"]) + B["R"], rho=np.array(A["rho"] * b))


def hla3_token(q, k, v, g):
    SK, SQ, P, m = np.outer(k, k), np.outer(q, q), np.outer(k, v), k.copy()
    return dict(SK=SK, P=P, m=m, F=SK @ q[:, None] @ (q[None, :] @ P), eta=(SK @ q) * (q @ m),
                SQ=SQ, X=SQ @ P, x=SQ @ m,
                Y=SK @ SQ)


def hla3_combine(A, B, variant=""):
    # F_AB = F_A + F_B + S^K_A X_B + Y_B P_A + S^K_A SQ_B P_A;
    # X_AB = X_A + X_B + SQ_B P_A; Y_AB = Y_A + Y_B + S^K_A SQ_B
    return dict(SK=A["SK"] + B["SK"], P=A["P"] + B["P"], m=A["m"] + B["m"],
                F=A["F"] + B["F"] + A["SK"] @ B["X"] + B["Y"] @ A["P"] + A["SK"] @ B["SQ"] @ A["P"],
                eta=A["eta"] + B["eta"] + A["SK"] @ B["x"] + B["Y"] @ A["m"] + A["SK"] @ B["SQ"] @ A["m"],
                SQ=A["SQ"] + B["SQ"], X=A["X"] + B["X"] + B["SQ"] @ A["P"], x=A["x"] + B["x"] + B["SQ"] @ A["m"],
                Y=A["Y"] + B["Y"] + A["SK"] @ B["SQ"])


OPS = {"hla2": (hla2_token, hla2_combine), "linear": (linear_token, linear_combine), "ahla": (ahla_token, ahla_combine),
       "hla3": (hla3_token, hla3_combine)}
RENAMED = {"S": "keys2", "C": "qv", "m": "qsum", "G": "cross", "h": "cross1", "rho": "decay"}


def callables(name):
    op, variant = (name.split(":", 1) + [""])[:2]
    token, comb = OPS[op]

    def identity(d, dv, dt):
        z = {p: np.zeros_like(x) for p, x in token(np.zeros(d), np.zeros(d), np.zeros(dv), 1.0).items()}
        if "rho" in z:
            z["rho"] = np.array(1.0)
        if variant == "bad-identity":
            z = {p: x + 1 for p, x in z.items()}
        return z

    def out(s, dt, n=None):
        s = {p: np.asarray(x, dtype=dt) for p, x in s.items()}
        if variant == "no-rho":
            s.pop("rho", None)
        if variant == "renamed":
            s = {RENAMED[p]: x for p, x in s.items()}
        return s

    def inp(s, g, n):
        if variant == "renamed":
            s = {p: s[RENAMED[p]] for p in RENAMED}
        s = {p: np.asarray(x, dtype=np.float64) for p, x in s.items()}
        if variant == "no-rho":
            s["rho"] = np.array(g ** n)
        return s

    def work(x, dt):
        return x.astype(np.float32).astype(np.float64) if variant == "float32" else x

    def segment(q, k, v, gamma=1.0):
        dt = q.dtype
        n, d = q.shape
        s = identity(d, v.shape[1], dt)
        for t in range(n):
            s = comb(s, token(q[t], k[t], v[t], gamma), variant)
            s = {p: work(x, dt) for p, x in s.items()}
        return out(s, dt)

    def combine(a, b, a_tokens=0, b_tokens=0, gamma=1.0):
        dt = next(iter(a.values())).dtype
        r = comb(inp(a, gamma, a_tokens), inp(b, gamma, b_tokens), variant)
        return out({p: work(x, dt) for p, x in r.items()}, dt)

    return segment, combine


def main(name, root):
    segment, combine = callables(name)
    for case in sorted(os.listdir(root)):
        cdir = os.path.join(root, case)
        meta = json.load(open(os.path.join(cdir, "case.json")))
        g = meta["gamma"]
        if meta["kind"] == "segment":
            q, k, v = (np.load(os.path.join(cdir, f + ".npy")) for f in "qkv")
            s, target = segment(q, k, v, gamma=g), "summary"
        else:
            def load(side):
                return {f[:-4]: np.load(os.path.join(cdir, side, f)) for f in os.listdir(os.path.join(cdir, side))}
            s, target = combine(load("a"), load("b"), meta["a_tokens"], meta["b_tokens"], gamma=g), "ab"
        os.makedirs(os.path.join(cdir, target), exist_ok=True)
        for p, x in s.items():
            np.save(os.path.join(cdir, target, p + ".npy"), x)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
