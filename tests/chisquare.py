"""Chi-square helpers shared by the exactness tests of the engine and of real models."""

import numpy as np


def pool_small_cells(observed, expected, minimum=5.0):
    """Pool every cell expecting fewer than `minimum` counts into one, as chi-square requires."""
    small = expected < minimum
    if not small.any():
        return observed, expected
    observed = np.append(observed[~small], observed[small].sum())
    expected = np.append(expected[~small], expected[small].sum())
    if expected[-1] < minimum:  # the pooled cell is still too small: fold it into the smallest
        smallest = np.argmin(expected[:-1])
        observed[smallest] += observed[-1]
        expected[smallest] += expected[-1]
        observed, expected = observed[:-1], expected[:-1]
    return observed, expected
