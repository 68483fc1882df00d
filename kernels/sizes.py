"""Integer arithmetic on sizes that the generators, the configs and the models share."""

from __future__ import annotations


def ceil_div(x: int, d: int) -> int:
    """⌈x / d⌉ for positive d: how many pieces of `d` cover `x`."""
    return -(-x // d)


def round_up(x: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= x."""
    return ceil_div(x, multiple) * multiple
