"""The `hla verify --exec` protocol from the implementation's side, in a dozen lines: copy it, or import it.

    python3 my_hla.py DIR   ->   for every case directory DIR/<case>/: read q.npy, k.npy, v.npy, case.json
                                 (and state_in/<part>.npy), write o.npy (and state_out/<part>.npy)

serve(fn) runs fn(q, k, v, gamma=, normalized=, eps=, ridge=, initial_state=) on every case; fn returns o,
or (o, final_state) where final_state maps SPEC's part names (`hla verify --op OP --list-state`) to arrays.
"""
import json
import os
import sys

import numpy as np


def serve(fn, root=None):
    root = root or sys.argv[-1]
    for case in sorted(os.listdir(root)):
        cdir = os.path.join(root, case)
        meta = json.load(open(os.path.join(cdir, "case.json")))
        q, k, v = (np.load(os.path.join(cdir, name + ".npy")) for name in ("q", "k", "v"))
        init = None
        if meta["state_in"]:
            init = {p: np.load(os.path.join(cdir, "state_in", p + ".npy")) for p in meta["state_in"]}
        out = fn(q, k, v, gamma=meta["gamma"], normalized=meta["normalized"], eps=meta["eps"], ridge=meta["ridge"],
                 initial_state=init)
        o, state = out if isinstance(out, tuple) else (out, None)
        np.save(os.path.join(cdir, "o.npy"), np.asarray(o, dtype=q.dtype))
        if meta["state"]:
            os.makedirs(os.path.join(cdir, "state_out"), exist_ok=True)
            for part, x in state.items():
                np.save(os.path.join(cdir, "state_out", part + ".npy"), np.asarray(x, dtype=q.dtype))
