#!/usr/bin/python3
# Writes the NumPy-made fixtures that tests/test_npy.cpp reads (and fuzz/corpus seeds from). Run from this
# folder with Debian's python3-numpy; the files are committed, so tests do not need NumPy.
# Values: element i (C order) of a shape-s array is (i - 7) / 8, exact in float32 and float64.
import numpy as np
from numpy.lib import format as fmt


def vals(shape, dtype):
    n = int(np.prod(shape))
    return ((np.arange(n) - 7) / 8).reshape(shape).astype(dtype)


np.save("f64_c_2x3.npy", vals((2, 3), "<f8"))
np.save("f32_c_2x3.npy", vals((2, 3), "<f4"))
np.save("f64_f_2x3x4.npy", np.asfortranarray(vals((2, 3, 4), "<f8")))
np.save("f32_f_3x2.npy", np.asfortranarray(vals((3, 2), "<f4")))
np.save("f64_1d_5.npy", vals((5,), "<f8"))
np.save("f64_0d.npy", np.float64(-0.875))
np.save("f64_empty_0x3.npy", np.zeros((0, 3)))
for version in [(2, 0), (3, 0)]:
    with open(f"f64_v{version[0]}_2x3.npy", "wb") as f:
        fmt.write_array(f, vals((2, 3), "<f8"), version=version)
np.save("i64_2x3.npy", np.arange(6, dtype="<i8").reshape(2, 3))
np.save("be_f8_2x3.npy", vals((2, 3), ">f8"))
np.save("f16_2.npy", vals((2,), "<f2"))
np.save("object_2.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
np.savez("savez.npz", q=vals((2, 3), "<f8"), k=np.asfortranarray(vals((3, 2), "<f4")))
np.savez_compressed("savez_compressed.npz", q=vals((2, 3), "<f8"), v=vals((4,), "<f4"), o=np.zeros((40, 40)))
