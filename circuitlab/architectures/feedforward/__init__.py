"""FFN designs for the block's FFN slot, and the parity bottleneck stage."""
