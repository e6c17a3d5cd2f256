"""Second-order HLA (SPEC's masked hla2, no decay) in the calling convention of the flash-linear-attention ops:
torch tensors q, k [B, T, H, K] and v [B, T, HV, V] (HV a multiple of H: grouped value heads), a `scale` on the
queries (default K^-1/2), `normalize` / `eps` / `ridge`, and the state as a tuple (S, C, m, G, h) of [B, HV, ...]
tensors in and out. Written for this repository as a user's op would be (a token loop over SPEC's recurrence,
docs/verify.md "The protocol"), and verified without an adapter:

    hla_harness.verify(hla2_bthk, "hla2", layout="bthk", normalized=True, eps=1e-6)

The normalized output divides by den + eps (SPEC's); fla's own op divides by sign(den) * max(|den|, eps), which
`hla verify` names as `convention:signed-clamp`.
"""
import torch


def hla2_bthk(q, k, v, scale=None, normalize=False, eps=1e-6, ridge=0.0, initial_state=None,
              output_final_state=False):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if k.shape != q.shape or v.shape[:2] != (B, T) or HV % H:
        raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    scale = K ** -0.5 if scale is None else scale
    q = (q * scale).repeat_interleave(HV // H, dim=2)  # each query head serves HV / H value heads
    k = k.repeat_interleave(HV // H, dim=2)
    if initial_state is None:
        zeros = q.new_zeros
        initial_state = (zeros(B, HV, K, K), zeros(B, HV, K, V), zeros(B, HV, K), zeros(B, HV, K, V), zeros(B, HV, K))
    S, C, m, G, h = (x.to(q.dtype).clone() for x in initial_state)
    out = q.new_empty(B, T, HV, V)
    for t in range(T):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]                  # [B, HV, K], [B, HV, K], [B, HV, V]
        kC = torch.einsum("bhk,bhkv->bhv", kt, C)              # with the previous C and m
        km = torch.einsum("bhk,bhk->bh", kt, m)
        G = G + kt[..., :, None] * kC[..., None, :]
        h = h + kt * km[..., None]
        S = S + kt[..., :, None] * kt[..., None, :]
        C = C + qt[..., :, None] * vt[..., None, :]
        m = m + qt
        u = torch.einsum("bhk,bhkj->bhj", qt, S) + ridge * qt
        num = torch.einsum("bhk,bhkv->bhv", u, C) - torch.einsum("bhk,bhkv->bhv", qt, G)
        if normalize:
            den = torch.einsum("bhk,bhk->bh", u, m) - torch.einsum("bhk,bhk->bh", qt, h)
            num = num / (den + eps)[..., None]
        out[:, t] = num
    return out, ((S, C, m, G, h) if output_final_state else None)
