"""The designs of the block's FFN slot, one module each (config section and layer): mlp, swiglu, sgatlin,
ncffn, peer, moe; hidden.py is the base of the FFNs that write W_out applied to a hidden vector."""
