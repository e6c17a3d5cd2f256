"""Implementations that write only the math and leave the protocol to examples/protocol.py, as a user would.

    python3 protocol_users.py forward|grad|combine DIR
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import combine_impls  # noqa: E402
import grad_impls  # noqa: E402
import impls  # noqa: E402
import protocol  # noqa: E402


def forward(q, k, v, gamma, normalized, eps, ridge, initial_state=None):
    return impls.hla2(q, k, v, gamma, normalized, eps, ridge, initial_state=initial_state)


def backward(q, k, v, do, gamma, normalized, eps, ridge, initial_state=None):
    return grad_impls.run("hla2", "", q, k, v, do, gamma, normalized, eps, ridge)


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "forward":
        protocol.serve(forward)
    elif kind == "grad":
        protocol.serve_grad(backward)
    else:
        protocol.serve_combine(*combine_impls.callables("hla2"))
