"""The `hla verify --exec` protocol from the implementation's side: copy it, or import it. You write only the math.

    python3 my_hla.py DIR   ->   for every case directory DIR/<case>/: read q.npy, k.npy, v.npy, case.json
                                 (and state_in/<part>.npy), write o.npy (and state_out/<part>.npy)

serve(fn) runs fn(q, k, v, gamma=, normalized=, eps=, ridge=, initial_state=) on every case; fn returns o,
or (o, final_state) where final_state maps SPEC's part names (`hla verify --op OP --list-state`) to arrays.
With `hla verify --gates`, gamma= is the case's per-token gates (gamma.npy, an array of shape (n,)).

serve_grad(fn) is the same for `hla verify --grad`: every case also holds do.npy (the upstream gradient dO), and
fn(q, k, v, do, gamma=, normalized=, eps=, ridge=, initial_state=) returns (o, dq, dk, dv), or
(o, dq, dk, dv, final_state), or (o, dq, dk, dv, final_state, dstate_in) with dstate_in the gradient with respect
to the initial state, part by part (a part left out is not judged). With `hla verify --gates --grad` it may also
return dgamma, the gradient with respect to the gates (shape (n,), written as dgamma.npy and judged when given),
right after dv: (o, dq, dk, dv, dgamma[, final_state[, dstate_in]]).

serve_combine(segment, combine) is the same for `hla verify --combine`: a "segment" case gives q, k, v of n >= 0
tokens to segment(q, k, v, gamma=) -> {part: array}; a "combine" case gives the parts of segments a and b (a
precedes b) to combine(a, b, a_tokens=, b_tokens=, gamma=) -> {part: array}.

Each serves every round of a battery in one process: after a round's outputs are written it answers DIR on the
file descriptor HLA_VERIFY_REPLY_FD names, and hla sends the next round's DIR on HLA_VERIFY_ROUND_FD's (so PyTorch is
imported once, not once per round). rounds() is that loop for a script with its own loop over the case directories.
"""
import json
import os
import sys

import numpy as np


def rounds(root=None):
    """Every round's directory: root alone when given; else the command line's last argument, and, when hla offers
    to keep the process (HLA_VERIFY_REPLY_FD and HLA_VERIFY_ROUND_FD in the environment), each further DIR it sends
    on the round descriptor until its end. A round is answered (its DIR on the reply descriptor) once the caller has
    asked for the next, i.e. when its outputs are written."""
    if root:
        yield root
        return
    reply_fd, round_fd = os.environ.get("HLA_VERIFY_REPLY_FD"), os.environ.get("HLA_VERIFY_ROUND_FD")
    keep = bool(reply_fd and round_fd)
    reply = os.fdopen(int(reply_fd), "w") if keep else None
    requests = os.fdopen(int(round_fd), "r") if keep else None
    root = sys.argv[-1]
    while root:
        yield root
        if not keep:
            return
        reply.write(root + "\n")
        reply.flush()
        root = requests.readline().rstrip("\n")


def _cases(root):
    """(case directory, case.json) for every case of every round, in order."""
    for directory in rounds(root):
        for case in sorted(os.listdir(directory)):
            cdir = os.path.join(directory, case)
            with open(os.path.join(cdir, "case.json")) as f:
                yield cdir, json.load(f)


def _load(cdir, *names):
    return (np.load(os.path.join(cdir, name + ".npy")) for name in names)


def _load_parts(directory):
    return {f[:-4]: np.load(os.path.join(directory, f)) for f in sorted(os.listdir(directory)) if f.endswith(".npy")}


def _save_parts(directory, parts, dtype=None):
    os.makedirs(directory, exist_ok=True)
    for part, x in (parts or {}).items():
        np.save(os.path.join(directory, part + ".npy"), np.asarray(x, dtype=dtype))


def _options(cdir, meta):
    init = _load_parts(os.path.join(cdir, "state_in")) if meta["state_in"] else None
    # with `hla verify --gates`, gamma is the per-token gates gamma.npy, shape (n,)
    gamma = np.load(os.path.join(cdir, "gamma.npy")) if meta.get("gates") else meta["gamma"]
    return dict(gamma=gamma, normalized=meta["normalized"], eps=meta["eps"], ridge=meta["ridge"],
                initial_state=init)


def serve(fn, root=None):
    for cdir, meta in _cases(root):
        q, k, v = _load(cdir, "q", "k", "v")
        out = fn(q, k, v, **_options(cdir, meta))
        o, state = out if isinstance(out, tuple) else (out, None)
        np.save(os.path.join(cdir, "o.npy"), np.asarray(o, dtype=q.dtype))
        if meta["state"]:
            _save_parts(os.path.join(cdir, "state_out"), state, q.dtype)


def serve_grad(fn, root=None):
    for cdir, meta in _cases(root):
        q, k, v, do = _load(cdir, "q", "k", "v", "do")
        out = tuple(fn(q, k, v, do, **_options(cdir, meta)))
        for name, x in zip(("o", "dq", "dk", "dv"), out):
            np.save(os.path.join(cdir, name + ".npy"), np.asarray(x, dtype=q.dtype))
        if meta.get("gates") and len(out) > 4 and out[4] is not None and not isinstance(out[4], dict):
            np.save(os.path.join(cdir, "dgamma.npy"), np.asarray(out[4], dtype=q.dtype).reshape(-1))  # ∂L/∂γ
            out = out[:4] + out[5:]
        if meta["state"] and len(out) > 4:
            _save_parts(os.path.join(cdir, "state_out"), out[4], q.dtype)
        if meta["state_in"] and len(out) > 5:
            _save_parts(os.path.join(cdir, "dstate_in"), out[5], q.dtype)


def serve_combine(segment, combine, root=None):
    for cdir, meta in _cases(root):
        if meta["kind"] == "segment":
            q, k, v = _load(cdir, "q", "k", "v")
            _save_parts(os.path.join(cdir, "summary"), segment(q, k, v, gamma=meta["gamma"]))
        else:
            a, b = (_load_parts(os.path.join(cdir, side)) for side in ("a", "b"))
            _save_parts(os.path.join(cdir, "ab"),
                        combine(a, b, a_tokens=meta["a_tokens"], b_tokens=meta["b_tokens"], gamma=meta["gamma"]))
