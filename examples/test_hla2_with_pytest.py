"""A user's own pytest test of their implementation through the pip-installed module (docs/build.md):

    python3 -m venv --system-site-packages .venv && .venv/bin/pip install --no-build-isolation .
    .venv/bin/python -m pytest examples/test_hla2_with_pytest.py

pytest puts this file's folder on sys.path, so `torch_hla2_chunked` (the implementation under test) imports.
"""
import hla_harness
import torch_hla2_chunked


def test_chunked_hla2_computes_the_normalized_decayed_operator():
    r = hla_harness.verify(torch_hla2_chunked.hla2_chunked, "hla2", gamma=0.9, normalized=True, eps=1e-3,
                           max_n=300, d=8, dv=8)
    assert r["verdict"] == "computes", r["summary"]


def test_a_planted_bug_is_caught():
    def no_decay_across_chunks(q, k, v, gamma=1.0, **opts):  # the decay forgotten: computes γ = 1
        return torch_hla2_chunked.hla2_chunked(q, k, v, gamma=1.0, **opts)
    r = hla_harness.verify(no_decay_across_chunks, "hla2", gamma=0.9, max_n=64, d=4, dv=4)
    assert r["verdict"] == "differs", r["summary"]
