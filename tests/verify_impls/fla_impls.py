"""Ops in fla's calling convention for `hla verify --layout` (the command-line adapter), built on
examples/fla_style_hla2.py: one right GQA op and ones with the batch/head faults the adapter names."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))

from fla_style_hla2 import hla2_bthk  # noqa: E402


def gqa(q, k, v, scale=None, normalize=False, eps=1e-6, ridge=0.0, initial_state=None, output_final_state=False):
    """GQA: q [B, T, G*H, K], k and v [B, T, H, ...]; query head h reads key/value head h // G."""
    G = q.shape[2] // k.shape[2]
    return hla2_bthk(q, k.repeat_interleave(G, 2), v.repeat_interleave(G, 2), scale=scale, normalize=normalize,
                     eps=eps, ridge=ridge, initial_state=initial_state, output_final_state=output_final_state)


def heads_rolled(q, k, v, scale=None, initial_state=None, output_final_state=False):
    """Head h returns head h - 1's outputs."""
    o, state = hla2_bthk(q, k, v, scale=scale, initial_state=initial_state, output_final_state=output_final_state)
    return o.roll(1, dims=2), state
