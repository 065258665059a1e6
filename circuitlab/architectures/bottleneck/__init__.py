"""Bottleneck stages on each block's FFN write, one module per design: parity (seed 003's deep parity
bottleneck, product design) with its dictionary's codes in parity_code."""
