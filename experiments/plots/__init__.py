"""The HLA harness's figures: one style (hla.mplstyle, style.py), one module per kind of figure.

  errors    forward error against the MPFR reference (bound, growth, normalization, paper vs corrected)
  timing    cost (per token vs n, vs d and dv, vs chunk width)
  backward  backward passes (time, stored memory, gradient error, checkpoint width)
  bench     make bench's GFLOP/s against the rooflines
  ledger    the claims ledger as a picture
  summary   summary.txt: every fitted slope and error exponent, one line per series
"""
